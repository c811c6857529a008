"""Token coefficients C = A* omega, and the chain TAC -> HTA -> APM -> C the method runs."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6
INPUTS = ("rewards", "values", "baseline", "turn_mask", "teacher_logp", "student_logp",
          "token_mask")


@jax.jit
def pipeline(rewards, values, baseline, turn_mask, teacher_logp, student_logp, token_mask):
    """factor_jax.methods.factor_pieces' chain, at eta = 0.7."""
    credit = fj.tac_credit(rewards, values, baseline, turn_mask)
    delta = fj.hindsight_delta(teacher_logp, student_logp, token_mask)
    weights = fj.apm_weights(fj.hta_scores(delta, credit, token_mask), token_mask, 0.7)
    return fj.token_coefficients(credit, weights, token_mask), credit


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


def _run(b):
    return pipeline(*(b[k] for k in INPUTS))


@given(batches())
def test_sign_and_action_mean_conserved(b):
    coef, credit = _run(b)
    coef, credit = np.asarray(coef, np.float64), np.asarray(credit, np.float64)
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
    coef, credit = _run(b)
    coef_p, credit_p = _run(p)
    np.testing.assert_array_equal(coef_p[:, :T, :A], coef)
    np.testing.assert_array_equal(credit_p[:, :T], credit)
    assert not np.any(coef_p[:, T:]) and not np.any(coef_p[..., A:])
    assert np.all(np.isfinite(coef_p))


def test_coefficients_are_constants():
    b = random_batch(np.random.default_rng(3), B, T, A)
    credit = jnp.asarray(np.random.default_rng(4).normal(size=(B, T)), jnp.float32)
    w = jnp.asarray(b["teacher_logp"])
    g = jax.grad(lambda c, w: jnp.sum(fj.token_coefficients(c, w, b["token_mask"])),
                 argnums=(0, 1))(credit, w)
    assert not np.any(g[0]) and not np.any(g[1])


def test_token_coefficients_hand_case():
    credit = jnp.array([[2.0, -1.0]])
    w = jnp.array([[[0.5, 1.5, 9.0], [3.0, 0.0, 0.0]]])
    m = jnp.array([[[True, True, False], [True, False, False]]])
    np.testing.assert_allclose(fj.token_coefficients(credit, w, m),
                               [[[1.0, 3.0, 0.0], [-3.0, 0.0, 0.0]]])
