"""Token coefficients and the whole TAC -> HTA -> APM -> C pipeline."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6
INPUTS = ("rewards", "values", "baseline", "turn_mask", "teacher_logp", "student_logp",
          "token_mask")


@functools.partial(jax.jit, static_argnames=("tau", "clip"))
def pipeline(rewards, values, baseline, turn_mask, teacher_logp, student_logp, token_mask,
             tau=1.0, clip=None):
    return fj.factor_coefficients(rewards, values, baseline, turn_mask, teacher_logp,
                                  student_logp, token_mask, tau=tau, clip=clip)


@st.composite
def batches(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    turns = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    one_token = draw(st.booleans())
    scale = draw(st.sampled_from([0.01, 1.0, 50.0]))
    rng = np.random.default_rng(seed)
    lengths = np.ones((B, T), int) if one_token else None
    b = random_batch(rng, B, T, A, turn_lengths=turns, token_lengths=lengths, scale=scale)
    if draw(st.booleans()):  # some actions with A* = 0 exactly: V~ telescopes to r = 0
        b["rewards"][:, 1:] = 0.0
        b["values"][:] = 0.0
    return b


def _run(b, **kw):
    return pipeline(*(b[k] for k in INPUTS), **kw)


@pytest.mark.parametrize("clip", [None, (0.5, 2.0)])
@given(batches(), st.sampled_from([0.05, 1.0]))
def test_sign_and_action_mean_conserved(clip, b, tau):
    coef, aux = _run(b, tau=tau, clip=clip)
    coef, credit = np.asarray(coef, np.float64), np.asarray(aux.credit, np.float64)
    mask = b["token_mask"]
    real = mask & (credit != 0)[..., None]
    # sign(C) = sign(A*) wherever A* != 0, on real tokens.
    np.testing.assert_array_equal(np.sign(coef[real]),
                                  np.broadcast_to(np.sign(credit)[..., None], mask.shape)[real])
    np.testing.assert_array_equal(coef[~mask], 0.0)
    np.testing.assert_array_equal(coef[mask & (credit == 0)[..., None]], 0.0)
    # mean_j C_{t,j} = A*_t.
    length = mask.sum(-1)
    mean = coef.sum(-1) / np.maximum(length, 1)
    has = length > 0
    np.testing.assert_allclose(mean[has], credit[has], rtol=1e-5, atol=1e-6)


@given(batches(), st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_result(b, seed):
    p = pad_batch(b, 2, 3, np.random.default_rng(seed), garbage=np.nan)
    coef, aux = _run(b)
    coef_p, aux_p = _run(p)
    np.testing.assert_array_equal(coef_p[:, :T, :A], coef)
    np.testing.assert_array_equal(aux_p.credit[:, :T], aux.credit)
    assert not np.any(coef_p[:, T:]) and not np.any(coef_p[..., A:])
    assert np.all(np.isfinite(coef_p))


def _allocate(b, credit, weigh):
    return fj.hindsight_allocation(jnp.asarray(credit), b["teacher_logp"], b["student_logp"],
                                   b["token_mask"], weigh)


def test_factor_is_tac_then_hindsight_allocation_with_apm():
    b = random_batch(np.random.default_rng(5), B, T, A)
    coef, aux = _run(b, tau=0.5)
    credit = fj.tac_credit(b["rewards"], b["values"], b["baseline"], b["turn_mask"])
    coef2, aux2 = _allocate(b, credit, functools.partial(fj.apm_weights, tau=0.5))
    np.testing.assert_allclose(coef, coef2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(aux.weights, aux2.weights, rtol=1e-6)


def test_uniform_weights_broadcast_the_action_credit():
    """The "without HTA" composition: omega = 1."""
    b = random_batch(np.random.default_rng(1), B, T, A)
    credit = fj.tac_credit(b["rewards"], b["values"], b["baseline"], b["turn_mask"])
    coef, aux = _allocate(b, credit, lambda s, m: fj.uniform_weights(m, s.dtype))
    expected = np.where(b["token_mask"], np.asarray(aux.credit)[..., None], 0.0)
    np.testing.assert_allclose(coef, expected, rtol=1e-6)


@given(batches())
def test_softmax_weights_shrink_the_action_mean_by_length(b):
    """The "without APM" composition: mean_j C_{t,j} = A_t / L_t, sign kept."""
    credit = np.asarray(fj.tac_credit(b["rewards"], b["values"], b["baseline"],
                                      b["turn_mask"]), np.float64)
    coef, _ = _allocate(b, credit.astype(np.float32), fj.softmax_weights)
    coef, mask = np.asarray(coef, np.float64), b["token_mask"]
    length = mask.sum(-1)
    has = length > 0
    np.testing.assert_allclose((coef.sum(-1) / np.maximum(length, 1))[has],
                               (credit / np.maximum(length, 1))[has], rtol=1e-5, atol=1e-6)
    real = mask & (credit != 0)[..., None]
    np.testing.assert_array_equal(np.sign(coef[real]),
                                  np.broadcast_to(np.sign(credit)[..., None], mask.shape)[real])


def test_allocation_of_a_given_action_credit():
    """The "without TAC" composition: any action credit (GRPO's) is spread the same way."""
    b = random_batch(np.random.default_rng(2), B, T, A)
    adv = np.broadcast_to(np.float32([1.0, -2.0, 0.5])[:, None], (B, T))
    credit = np.where(b["turn_mask"], adv, 0.0).astype(np.float32)
    coef, aux = _allocate(b, credit, fj.apm_weights)
    np.testing.assert_allclose(aux.credit, credit)
    mask = b["token_mask"]
    mean = np.asarray(coef).sum(-1) / np.maximum(mask.sum(-1), 1)
    has = mask.sum(-1) > 0
    np.testing.assert_allclose(mean[has], credit[has], rtol=1e-5, atol=1e-6)


def test_coefficients_are_constants():
    b = random_batch(np.random.default_rng(3), B, T, A)
    credit = jnp.asarray(np.random.default_rng(4).normal(size=(B, T)), jnp.float32)
    w = fj.apm_weights(jnp.asarray(b["teacher_logp"]), b["token_mask"])
    g = jax.grad(lambda c, w: jnp.sum(fj.token_coefficients(c, w, b["token_mask"])),
                 argnums=(0, 1))(credit, w)
    assert not np.any(g[0]) and not np.any(g[1])


def test_token_coefficients_hand_case():
    credit = jnp.array([[2.0, -1.0]])
    w = jnp.array([[[0.5, 1.5, 9.0], [3.0, 0.0, 0.0]]])
    m = jnp.array([[[True, True, False], [True, False, False]]])
    np.testing.assert_allclose(fj.token_coefficients(credit, w, m),
                               [[[1.0, 3.0, 0.0], [-3.0, 0.0, 0.0]]])
