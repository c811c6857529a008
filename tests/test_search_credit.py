"""Tests of the ASCT credit kernels (asct_jax.search.credit) on hand-computed cases."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.search import asct_advantage, centre_q

Q = np.array([[1.0, 2.0, 0.0, 4.0]], np.float32)
MASK = np.array([[True, True, False, True]])
LOGP = np.log(np.array([[0.5, 0.25, 0.125, 0.125]], np.float32))


def test_centre_logpi():
    out = np.asarray(centre_q(Q, MASK, LOGP, "logpi", alpha=1.0))
    np.testing.assert_allclose(out, [[1 + np.log(2), 2 + np.log(4), 0.0, 4 + np.log(8)]], rtol=1e-6)
    out = np.asarray(centre_q(Q, MASK, LOGP, "logpi", alpha=0.5))
    np.testing.assert_allclose(out[0, 0], 1 + 0.5 * np.log(2), rtol=1e-6)


def test_centre_policy_mean_renormalised_over_visited():
    # visited b: 0, 1, 3 with pi 0.5, 0.25, 0.125 -> weights 4/7, 2/7, 1/7.
    base = (4 * 1.0 + 2 * 2.0 + 1 * 4.0) / 7
    out = np.asarray(centre_q(Q, MASK, LOGP, "policy_mean"))
    np.testing.assert_allclose(out, [[1 - base, 2 - base, 0.0, 4 - base]], rtol=1e-6)
    # The pi-weighted mean of Q' over the visited actions is 0.
    w = np.array([4, 2, 0, 1]) / 7
    assert abs(float((w * out).sum())) < 1e-6


def test_centre_none_and_masking():
    out = np.asarray(centre_q(Q, MASK, LOGP, "none"))
    np.testing.assert_allclose(out, [[1, 2, 0, 4]])
    # -inf log-probs of masked (illegal) entries do not leak NaN / inf.
    logp = LOGP.copy()
    logp[0, 2] = -np.inf
    for mode in ("logpi", "policy_mean", "none"):
        assert np.all(np.isfinite(np.asarray(centre_q(Q, MASK, logp, mode))))
    # Nothing visited: policy_mean baseline 0, output 0.
    np.testing.assert_allclose(centre_q(Q, np.zeros_like(MASK), LOGP, "policy_mean"), 0.0)
    with pytest.raises(ValueError, match="mode"):
        centre_q(Q, MASK, LOGP, "mean")


def test_asct_advantage_masking_and_fallback():
    # B=1, T=5, K=3.
    qc = jnp.array([[[1.0, 2.0, 3.0]] * 5])
    qm = jnp.array([[[True, True, True], [True, False, True], [True, True, True],
                     [True, True, True], [True, True, True]]])
    idx = jnp.array([[2, 1, 0, -1, 1]], jnp.int32)
    values = jnp.array([[0.5, 0.5, 0.5, 0.5, 0.5]])
    fallback = jnp.array([[9.0, 8.0, 7.0, 6.0, 5.0]])
    searched = jnp.array([[True, True, False, True, True]])
    adv, fb = asct_advantage(qc, qm, idx, values, fallback, searched)
    # t0: Q'=3 - 0.5; t1: not visited -> 8; t2: not searched -> 7; t3: no action -> 6; t4: 2-0.5.
    np.testing.assert_allclose(adv, [[2.5, 8.0, 7.0, 6.0, 1.5]])
    np.testing.assert_array_equal(fb, [[False, True, True, True, False]])
    turn = jnp.array([[True, True, True, True, False]])
    adv, fb = asct_advantage(qc, qm, idx, values, fallback, searched, turn_mask=turn)
    np.testing.assert_allclose(adv, [[2.5, 8.0, 7.0, 6.0, 0.0]])
    assert int(fb.sum()) == 3


@given(seed=st.integers(0, 2**16))
def test_asct_advantage_random(seed):
    rng = np.random.default_rng(seed)
    b, t, k = 3, 4, 5
    qc = rng.normal(size=(b, t, k)).astype(np.float32)
    qm = rng.random((b, t, k)) < 0.6
    idx = rng.integers(-1, k, size=(b, t)).astype(np.int32)
    v = rng.normal(size=(b, t)).astype(np.float32)
    fbv = rng.normal(size=(b, t)).astype(np.float32)
    srch = rng.random((b, t)) < 0.7
    adv, used = jax.jit(asct_advantage)(qc, qm, idx, v, fbv, srch)
    for i in range(b):
        for j in range(t):
            has = srch[i, j] and idx[i, j] >= 0 and qm[i, j, idx[i, j]]
            expect = qc[i, j, idx[i, j]] - v[i, j] if has else fbv[i, j]
            assert abs(float(adv[i, j]) - expect) < 1e-6 and bool(used[i, j]) == (not has)


# --------------------------------------------- the paper's actor-centred credit (Eqs. 3-4)
def _pwa(q, mask, logp, taken, turn=None):
    from asct_jax.search import policy_weighted_advantage
    q, mask, logp = (np.asarray(x)[None, None] for x in (q, mask, logp))
    taken = np.asarray([[taken]], np.int32)
    turn = np.ones((1, 1), bool) if turn is None else np.asarray([[turn]])
    return float(policy_weighted_advantage(q, mask, logp, taken, turn)[0, 0])


def test_policy_weighted_advantage_hand_worked():
    # Q_hat = (0.6, 0.2, 0.5), p = (0.5, 0.3, 0.2): V_hat = 0.3 + 0.06 + 0.1 = 0.46.
    q = np.array([0.6, 0.2, 0.5], np.float32)
    p = np.log(np.array([0.5, 0.3, 0.2], np.float32))
    m = np.ones(3, bool)
    assert _pwa(q, m, p, 0) == pytest.approx(0.6 - 0.46, abs=1e-6)
    assert _pwa(q, m, p, 1) == pytest.approx(0.2 - 0.46, abs=1e-6)
    # The same table with uniform centring (mean 0.4333) gives +0.0667 for action 2; the
    # actor's weights give 0.5 - 0.46 = +0.04, and for action 1 the two differ in size.
    assert _pwa(q, m, p, 2) == pytest.approx(0.04, abs=1e-6)
    # Not a real turn, or no taken action: 0.
    assert _pwa(q, m, p, 0, turn=False) == 0.0
    assert _pwa(q, m, p, -1) == 0.0
    # An action without estimate is left out and the weights renormalised: p = (.5, .2)/.7.
    m2 = np.array([True, False, True])
    v = (0.5 * 0.6 + 0.2 * 0.5) / 0.7
    assert _pwa(q, m2, p, 2) == pytest.approx(0.5 - v, abs=1e-6)
    assert _pwa(q, m2, p, 1) == 0.0           # the taken action has no estimate


@given(st.integers(0, 2**31 - 1), st.integers(2, 6))
def test_policy_weighted_advantage_centred_under_pi_old(seed, k):
    """sum_a p_a A(s, a) = 0: the credit is centred under the frozen actor (the baseline
    subtracted once), and adding a constant to Q_hat leaves A unchanged."""
    from asct_jax.search import policy_weighted_advantage
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, k, k)).astype(np.float32)
    logits = rng.normal(size=(1, k, k))
    logp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
    mask = np.ones((1, k, k), bool)
    taken = np.arange(k, dtype=np.int32)[None]          # turn j takes action j
    turn = np.ones((1, k), bool)
    a = np.asarray(policy_weighted_advantage(q, mask, logp, taken, turn))
    # Every turn has the same state here only if rows are equal: use row 0 for all.
    q0 = np.repeat(q[:, :1], k, 1)
    lp0 = np.repeat(logp[:, :1], k, 1)
    a0 = np.asarray(policy_weighted_advantage(q0, mask, lp0, taken, turn))[0]
    np.testing.assert_allclose(np.sum(np.exp(lp0[0, 0]) * a0), 0.0, atol=1e-5)
    a_shift = np.asarray(policy_weighted_advantage(q + 3.0, mask, logp, taken, turn))
    np.testing.assert_allclose(a_shift, a, atol=1e-5)
