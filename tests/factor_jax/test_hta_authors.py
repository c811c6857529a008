"""HTA -> APM, FACTOR's token weights as the method computes them (factor_jax.hta's scores,
factor_jax.apm's weights), against the FACTOR authors' code: their unit tests' hand-worked
numbers (re-derived here, in our layout: tests/helpers/factor_kernels.py), and properties;
and the authors' kernels (these weights, the warm-up credit, the policy loss, the
checkpoint turns) vmapped over a seed axis.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch
from tests.helpers.factor_kernels import A, B, PROPS, T, f32, masks as _masks


def hta_weights(delta, credit, mask, eta, tau=1.0, clip_d=3.0):
    """FACTOR's token weights as the method computes them: APM of the HTA scores."""
    return fj.apm_weights(fj.hta_scores(delta, credit, mask, clip_d), mask, eta, tau=tau)


hta = jax.jit(hta_weights, static_argnames=("tau", "clip_d"))


# ============================================================ hta_scores -> apm_weights

def _one_action(gaps, credit, eta, tau=1.0, clip_d=3.0):
    gaps = f32(gaps)[None, None]
    mask = jnp.ones(gaps.shape, bool)
    return np.asarray(hta(gaps, f32([[credit]]), mask, eta, tau=tau, clip_d=clip_d))[0, 0]


def _softmax(x):
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


def test_hta_outcome_scores_hand_case():
    """s = sign(A*) clip(delta, -3, 3): delta (0.5, -5, 10) -> (0.5, -3, 3) for A* > 0, the
    negation for A* < 0, 0 (uniform) for A* = 0. At eta = 1, omega = L softmax(s)."""
    gaps = [0.5, -5.0, 10.0]
    np.testing.assert_allclose(_one_action(gaps, 2.0, 1.0), 3 * _softmax([0.5, -3, 3]),
                               rtol=1e-5)
    np.testing.assert_allclose(_one_action(gaps, -2.0, 1.0), 3 * _softmax([-0.5, 3, -3]),
                               rtol=1e-5)
    np.testing.assert_allclose(_one_action(gaps, 0.0, 1.0), 1.0, rtol=1e-6)
    # The raw gap is not clipped (the clip lives in the score).
    np.testing.assert_allclose(fj.hindsight_delta(f32([[[5.0]]]), f32([[[-5.0]]]),
                                                  jnp.ones((1, 1, 1), bool)), 10.0)
    np.testing.assert_allclose(
        fj.hindsight_delta(f32([[[0.0, -1.0, -2.0]]]), f32([[[-0.5, -1.5, -2.5]]]),
                           jnp.ones((1, 1, 3), bool)), 0.5)
    # rho = (1 - eta) / L + eta softmax: eta = 0.5 by hand.
    rho = 0.5 / 3 + 0.5 * _softmax([0.5, -3, 3])
    np.testing.assert_allclose(_one_action(gaps, 2.0, 0.5), 3 * rho, rtol=1e-5)


def test_hta_allocation_direction_and_sharpness():
    pos, neg = _one_action([2.0, -2.0], 1.0, 1.0), _one_action([2.0, -2.0], -1.0, 1.0)
    assert pos[0] > pos[1]  # A* > 0: the highest-gap token gets the most credit
    assert neg[1] > neg[0]  # A* < 0: the lowest-gap token bears the most blame
    low, high = _one_action([2.0, 0, 0, 0], 1.0, 0.2), _one_action([2.0, 0, 0, 0], 1.0, 0.7)
    assert high[0] > low[0]
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(_one_action(rng.normal(size=5), 1.0, 0.0), 1.0)
    for eta in (0.1, 0.5, 0.7):  # mean one per action, rho sums to one
        for n in (8, 3):
            w = _one_action(rng.normal(size=n), 1.0, eta)
            assert abs(w.mean() - 1.0) < 1e-5 and abs((w / n).sum() - 1.0) < 1e-5


def test_hta_dense_hand_case():
    """The authors' dense builder case: two 3-token actions with credits (1, -1), one
    gap 1 in the first, -1 in the second, step 20 (eta = 0.42); a padded slot stays 0."""
    delta = f32([[[1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]]])
    mask = jnp.array([[[True, True, True, False]] * 2])
    w = np.asarray(hta(delta, f32([[1.0, -1.0]]), mask, fj.eta_schedule(20)))
    np.testing.assert_array_equal(w[..., 3], 0.0)
    np.testing.assert_allclose(w[..., :3].mean(-1), 1.0, atol=1e-6)
    # Negative credit: the low-gap token gets the larger multiplier (eta0 = 1 at step 20).
    delta = f32([[[2.0, -2.0, 0.0]]])
    w = np.asarray(hta(delta, f32([[-1.0]]), jnp.ones((1, 1, 3), bool),
                       fj.eta_schedule(20, eta0=1.0)))
    assert w[0, 0, 1] > w[0, 0, 0]


def test_hta_traced_eta_and_empty_actions():
    mask = jnp.zeros((1, 2, 3), bool).at[0, 0, :2].set(True)
    delta = f32(np.full((1, 2, 3), np.nan)).at[0, 0, :2].set(jnp.array([1.0, -1.0]))
    w = jax.jit(lambda e: hta_weights(delta, f32([[1.0, 1.0]]), mask, e))(0.5)
    np.testing.assert_allclose(np.asarray(w)[0, 0, :2].mean(), 1.0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(w)[0, 0, 2], 0.0)
    np.testing.assert_array_equal(np.asarray(w)[0, 1], 0.0)  # no mask token: 0
    with pytest.raises(ValueError, match="eta"):
        hta_weights(delta, f32([[1.0, 1.0]]), mask, 1.5)


@PROPS
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 0.99), st.sampled_from([0.5, 1.0, 2.0]),
       st.sampled_from([1e-3, 1.0, 30.0]))
def test_hta_weight_properties(seed, eta, tau, scale):
    rng = np.random.default_rng(seed)
    turn_mask, mask = _masks(rng)
    delta = f32(scale * rng.normal(size=(B, T, A)))
    credit = rng.normal(size=(B, T))
    credit[rng.random((B, T)) < 0.3] = 0.0
    credit = f32(credit)
    w = np.asarray(hta(delta, credit, jnp.asarray(mask), eta, tau=tau), np.float64)
    length = mask.sum(-1)
    mean = w.sum(-1) / np.maximum(length, 1)
    np.testing.assert_allclose(mean[length > 0], 1.0, atol=2e-6)
    np.testing.assert_array_equal(w[~mask], 0.0)
    assert np.all(w[mask] >= 1.0 - eta - 1e-5)
    flat = mask & (np.asarray(credit) == 0)[..., None]  # A* = 0: uniform
    np.testing.assert_allclose(w[flat], 1.0, atol=1e-6)
    coef = np.asarray(credit)[..., None] * w
    np.testing.assert_array_equal(np.sign(coef[mask]),
                                  np.sign(np.broadcast_to(np.asarray(credit)[..., None],
                                                          mask.shape)[mask]))
    w0 = np.asarray(hta(delta, credit, jnp.asarray(mask), 0.0, tau=tau))
    np.testing.assert_array_equal(w0[mask], 1.0)  # eta = 0: exactly uniform
    # Padding (nan) changes nothing.
    p = pad_batch({"delta": np.asarray(delta), "turn_mask": turn_mask, "token_mask": mask},
                  1, 2, rng, garbage=np.nan)
    credit_p = jnp.pad(credit, ((0, 0), (0, 1)), constant_values=jnp.nan)
    w_p = np.asarray(hta(f32(p["delta"]), credit_p, jnp.asarray(p["token_mask"]), eta,
                         tau=tau))
    np.testing.assert_array_equal(w_p[:, :T, :A], np.asarray(
        hta(f32(np.where(mask, delta, 0)), credit, jnp.asarray(mask), eta, tau=tau)))
    assert not np.any(w_p[:, T:]) and not np.any(w_p[..., A:])


# ============================================================ vmap over seeds

def test_kernels_vmap_over_a_seed_axis():
    rng = np.random.default_rng(3)
    s = 2
    masks = [_masks(rng, min_len=1) for _ in range(s)]
    turn_mask = jnp.asarray(np.stack([m[0] for m in masks]))
    mask = jnp.asarray(np.stack([m[1] for m in masks]))
    delta = f32(rng.normal(size=(s, B, T, A)))
    credit = f32(rng.normal(size=(s, B, T)))
    etas = f32([0.2, 0.6])
    w = jax.vmap(hta_weights)(delta, credit, mask, etas)
    for i in range(s):
        np.testing.assert_allclose(w[i], hta_weights(delta[i], credit[i], mask[i], etas[i]),
                                   rtol=1e-6)
    a_seq = f32(rng.normal(size=(s, B)))
    c = jax.vmap(fj.warmup_credit)(a_seq, turn_mask)
    np.testing.assert_allclose(c[1], fj.warmup_credit(a_seq[1], turn_mask[1]), rtol=1e-6)
    loss = jax.vmap(lambda *x: fj.factor_policy_loss(*x, clip_eps=0.2))(
        delta, delta * 0.9, delta, a_seq, mask, ~mask)
    one = fj.factor_policy_loss(delta[0], delta[0] * 0.9, delta[0], a_seq[0], mask[0], ~mask[0],
                                clip_eps=0.2)
    np.testing.assert_allclose(loss["act"][0], one["act"], rtol=1e-6)
    idx, _ = jax.vmap(fj.checkpoint_turns)(turn_mask, jax.random.split(jax.random.PRNGKey(0), s))
    assert idx.shape == (s, B, 2)
