"""Tests for asct_jax.rl.advantages: golden values, NumPy loops, rlax, telescoping, the
closed forms against the reverse lax.scan (experiments/bench/scan_references.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax.rl import advantages as adv
from experiments.bench.scan_references import gae_scan_reference, returns_to_go_scan_reference
from tests.helpers.tiers import examples


def _batch(seed, b=6, t=5, lengths=None):
    rng = np.random.default_rng(seed)
    if lengths is None:
        lengths = rng.integers(1, t + 1, size=b)
    mask = np.arange(t)[None, :] < np.asarray(lengths)[:, None]
    rewards = rng.normal(size=(b, t)).astype(np.float32) * mask
    values = rng.normal(size=(b, t)).astype(np.float32)
    return jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(mask)


def _gae_numpy(r, v, m, gamma, lam):
    """Per-episode Python loop: the textbook recursion on the real turns only."""
    r, v, m = map(np.asarray, (r, v, m))
    adv_out = np.zeros_like(r)
    for i in range(r.shape[0]):
        n = int(m[i].sum())
        a = 0.0
        for t in reversed(range(n)):
            v_next = v[i, t + 1] if t + 1 < n else 0.0
            delta = r[i, t] + gamma * v_next - v[i, t]
            a = delta + gamma * lam * a
            adv_out[i, t] = a
    return adv_out, (adv_out + v) * m


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0), (0.99, 0.0)])
def test_gae_matches_numpy_loop_and_rlax(gamma, lam):
    r, v, m = _batch(0, b=8, t=6)
    a, targets = jax.jit(adv.gae)(r, v, m, gamma, lam)
    a_np, t_np = _gae_numpy(r, v, m, gamma, lam)
    np.testing.assert_allclose(a, a_np, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, t_np, rtol=1e-5, atol=1e-5)

    # rlax: discount_t = gamma * m_{t+1}, values = [m * V, 0] (V = 0 after the last turn).
    mf = m.astype(jnp.float32)
    discount = gamma * jnp.concatenate([mf[:, 1:], jnp.zeros_like(mf[:, :1])], axis=1)
    values = jnp.concatenate([v * mf, jnp.zeros_like(v[:, :1])], axis=1)
    ref = jax.vmap(rlax.truncated_generalized_advantage_estimation,
                   in_axes=(0, 0, None, 0))(r * mf, discount, lam, values)
    np.testing.assert_allclose(a, ref * mf, rtol=1e-5, atol=1e-5)


def test_gae_golden_single_episode():
    # One episode of 2 turns in a horizon of 3, gamma=1, lam=0.5.
    r = jnp.array([[0.0, 1.0, 7.0]])
    v = jnp.array([[0.5, 0.25, 9.0]])
    m = jnp.array([[True, True, False]])
    a, tg = adv.gae(r, v, m, 1.0, 0.5)
    # delta_1 = 1 + 0 - 0.25 = 0.75; delta_0 = 0 + 0.25 - 0.5 = -0.25
    # A_1 = 0.75; A_0 = -0.25 + 0.5 * 0.75 = 0.125
    np.testing.assert_allclose(a, [[0.125, 0.75, 0.0]])
    np.testing.assert_allclose(tg, [[0.625, 1.0, 0.0]])


def test_returns_to_go_and_episode_returns():
    r = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = jnp.array([[True, True, True], [True, False, False]])
    np.testing.assert_allclose(adv.returns_to_go(r, m), [[6.0, 5.0, 3.0], [4.0, 0.0, 0.0]])
    np.testing.assert_allclose(adv.returns_to_go(r, m, gamma=0.5),
                               [[1 + 1 + 0.75, 2 + 1.5, 3.0], [4.0, 0.0, 0.0]])
    np.testing.assert_allclose(adv.episode_returns(r, m), [6.0, 4.0])


def test_vineppo_golden():
    r = jnp.array([[0.0, 0.0, 1.0]])
    vh = jnp.array([[0.2, 0.6, 0.9]])
    m = jnp.array([[True, True, True]])
    np.testing.assert_allclose(adv.vineppo_advantages(r, vh, m), [[0.4, 0.3, 0.1]], rtol=1e-6)


@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t=st.integers(1, 7))
def test_vineppo_telescopes(seed, b, t):
    """sum_t A_t = G - V^(s_0) for every episode, whatever the intermediate V^."""
    r, v, m = _batch(seed, b=b, t=t)
    a = adv.vineppo_advantages(r, v, m)
    g = adv.episode_returns(r, m)
    np.testing.assert_allclose(jnp.sum(a, axis=1), g - v[:, 0], rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(a)[~np.asarray(m)] == 0)


@given(seed=st.integers(0, 2**31 - 1))
def test_gae_lambda_one_is_return_minus_value(seed):
    """With lam = gamma = 1 GAE is the Monte-Carlo advantage G_t - V_t."""
    r, v, m = _batch(seed)
    a, targets = adv.gae(r, v, m, 1.0, 1.0)
    rtg = adv.returns_to_go(r, m)
    np.testing.assert_allclose(a, (rtg - v) * m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, rtg, rtol=1e-5, atol=1e-5)


def test_broadcast_to_tokens():
    a = jnp.array([[1.0, -2.0]])
    tm = jnp.array([[[True, True, False], [True, False, False]]])
    np.testing.assert_allclose(adv.broadcast_to_tokens(a, tm), [[[1, 1, 0], [-2, 0, 0]]])


def test_masks_and_shapes_are_checked():
    r, v, m = _batch(1)
    with pytest.raises(AssertionError):
        adv.gae(r, v, m.astype(jnp.float32), 1.0, 0.9)
    with pytest.raises(AssertionError):
        adv.gae(r, v[:, :-1], m, 1.0, 0.9)


# ------------------------------------------------- closed forms vs the reverse lax.scan
def _ragged(seed, b, t, with_empty=True):
    """[b, t] rewards / values and a ragged prefix mask (lengths 0 .. t when with_empty)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0 if with_empty else 1, t + 1, size=b)
    lengths[0] = t  # at least one full-length episode
    mask = np.arange(t)[None, :] < lengths[:, None]
    # Rewards and values are garbage where masked: the estimators must not read them.
    rewards = rng.normal(size=(b, t)).astype(np.float32)
    values = rng.normal(size=(b, t)).astype(np.float32)
    return jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(mask)


# T <= adv._UNROLL_MAX_T (4) takes the unrolled sum, longer horizons the matmul.
@pytest.mark.parametrize("t", [1, 3, 4, 5, 8, 9, 33, 40])
@pytest.mark.parametrize("gamma", [1.0, 0.95])
@pytest.mark.parametrize("lam", [1.0, 0.95, 0.0])
def test_gae_closed_form_matches_scan_reference(t, gamma, lam):
    r, v, m = _ragged(t, b=37, t=t)
    ref_a, ref_tg = gae_scan_reference(r, v, m, gamma, lam)
    static = jax.jit(lambda r, v, m: adv.gae(r, v, m, gamma, lam))(r, v, m)  # U a constant
    traced = jax.jit(adv.gae)(r, v, m, gamma, lam)                           # U in-graph
    for a, tg in (static, traced, adv.gae(r, v, m, gamma, lam)):
        np.testing.assert_allclose(a, ref_a, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(tg, ref_tg, rtol=1e-5, atol=1e-5)
        assert np.all(np.asarray(a)[~np.asarray(m)] == 0)
        assert np.all(np.asarray(tg)[~np.asarray(m)] == 0)


@pytest.mark.parametrize("t", [1, 4, 5, 9, 40])
@pytest.mark.parametrize("gamma", [1.0, 0.95])
@pytest.mark.parametrize("lam", [1.0, 0.95, 0.0])
def test_gae_closed_form_matches_rlax_full_episodes(t, gamma, lam):
    """Full-length episodes: rlax's GAE with a zero bootstrap value after the last turn."""
    rng = np.random.default_rng(t)
    r = jnp.asarray(rng.normal(size=(16, t)).astype(np.float32))
    v = jnp.asarray(rng.normal(size=(16, t)).astype(np.float32))
    m = jnp.ones((16, t), bool)
    a, tg = jax.jit(adv.gae)(r, v, m, gamma, lam)
    discount = jnp.full((16, t), gamma, jnp.float32).at[:, -1].set(0.0)
    values = jnp.concatenate([v, jnp.zeros_like(v[:, :1])], axis=1)
    ref = jax.vmap(rlax.truncated_generalized_advantage_estimation,
                   in_axes=(0, 0, None, 0))(r, discount, lam, values)
    np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tg, ref + v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", [1, 4, 5, 9, 33, 40])
@pytest.mark.parametrize("gamma", [1.0, 0.95])
def test_returns_to_go_closed_form_matches_scan_reference_and_rlax(t, gamma):
    r, _, m = _ragged(100 + t, b=37, t=t)
    ref = returns_to_go_scan_reference(r, m, gamma)
    for g in (jax.jit(lambda r, m: adv.returns_to_go(r, m, gamma))(r, m),
              jax.jit(adv.returns_to_go)(r, m, gamma), adv.returns_to_go(r, m, gamma)):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)
        assert np.all(np.asarray(g)[~np.asarray(m)] == 0)
    # rlax: discount_t = gamma * m_{t+1} on masked rewards, bootstrap 0.
    mf = m.astype(jnp.float32)
    discount = gamma * jnp.concatenate([mf[:, 1:], jnp.zeros_like(mf[:, :1])], axis=1)
    rl = jax.vmap(rlax.discounted_returns, in_axes=(0, 0, None))(r * mf, discount, 0.0)
    np.testing.assert_allclose(adv.returns_to_go(r, m, gamma), rl * mf, rtol=1e-5, atol=1e-5)
    full = jnp.ones_like(m)
    rl_full = jax.vmap(rlax.lambda_returns, in_axes=(0, 0, 0, None))(
        r, jnp.full(r.shape, gamma).at[:, -1].set(0.0), jnp.zeros_like(r), 1.0)
    np.testing.assert_allclose(adv.returns_to_go(r, full, gamma), rl_full, rtol=1e-5, atol=1e-5)


@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 9), t=st.integers(1, 41),
       gamma=st.sampled_from([1.0, 0.95]), lam=st.sampled_from([1.0, 0.95, 0.0]))
def test_suffix_sum_matches_reverse_scan(seed, b, t, gamma, lam):
    """The closed form equals the reverse scan for any shape, mask and (gamma, lam)."""
    r, v, m = _ragged(seed, b=b, t=t)
    a, tg = adv.gae(r, v, m, gamma, lam)
    ref_a, ref_tg = gae_scan_reference(r, v, m, gamma, lam)
    np.testing.assert_allclose(a, ref_a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tg, ref_tg, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv.returns_to_go(r, m, gamma),
                               returns_to_go_scan_reference(r, m, gamma),
                               rtol=1e-5, atol=1e-5)


def test_suffix_matrix_static_equals_traced():
    for c in (1.0, 0.95, 0.5, 0.0):
        static = adv._suffix_matrix(c, 9, jnp.float32)
        traced = jax.jit(lambda c: adv._suffix_matrix(c, 9, jnp.float32))(c)
        np.testing.assert_allclose(static, traced, rtol=1e-6, atol=0)
    np.testing.assert_allclose(adv._suffix_matrix(0.5, 3, jnp.float32),
                               [[1, 0, 0], [0.5, 1, 0], [0.25, 0.5, 1]])


def test_gae_gradients_match_scan_reference():
    """d/d rewards of the closed form equals that of the scan (values: stop_gradient)."""
    r, v, m = _ragged(7, b=5, t=12)
    f = lambda fn: lambda r: jnp.sum(jnp.sin(fn(r, v, m, 0.95, 0.9)[0]))  # noqa: E731
    np.testing.assert_allclose(jax.grad(f(adv.gae))(r), jax.grad(f(gae_scan_reference))(r),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t", [3, 12])
def test_closed_forms_vmap_over_gamma_lambda(t):
    """gamma / lam batched by vmap (U built in-graph per batch entry) equal the scan."""
    r, v, m = _ragged(11, b=5, t=t)
    gs, ls = jnp.array([1.0, 0.95, 0.5]), jnp.array([0.0, 0.95, 1.0])
    out = jax.vmap(lambda g, l: adv.gae(r, v, m, g, l))(gs, ls)
    ref = jax.vmap(lambda g, l: gae_scan_reference(r, v, m, g, l))(gs, ls)
    for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.vmap(lambda g: adv.returns_to_go(r, m, g))(gs),
                               jax.vmap(lambda g: returns_to_go_scan_reference(r, m, g))(gs),
                               rtol=1e-5, atol=1e-5)


@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t=st.integers(1, 7),
       fill=st.sampled_from([np.nan, np.inf, -np.inf, 1e30]))
def test_padding_never_leaks_into_the_turn_kernels(seed, b, t, fill):
    """Whatever sits in the masked turns (nan, inf, huge) the outputs equal those of zeros
    there: the kernels zero padding before any arithmetic (docs/methods.md, Masks)."""
    rng = np.random.default_rng(seed)
    mask = np.arange(t)[None] < rng.integers(0, t + 1, size=(b, 1))
    r, v = (rng.normal(size=(b, t)).astype(np.float32) for _ in range(2))
    dirty = lambda x: jnp.asarray(np.where(mask, x, fill).astype(np.float32))  # noqa: E731
    clean = lambda x: jnp.asarray(np.where(mask, x, 0.0).astype(np.float32))  # noqa: E731
    m = jnp.asarray(mask)
    for fn in (lambda r, v: adv.returns_to_go(r, m, 0.9),
               lambda r, v: adv.episode_returns(r, m),
               lambda r, v: adv.td_residuals(r, v, m, 0.9),
               lambda r, v: adv.gae(r, v, m, 0.9, 0.8)):
        got, want = fn(dirty(r), dirty(v)), fn(clean(r), clean(v))
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert np.all(np.isfinite(np.asarray(g)))
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@settings(max_examples=examples(25), deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.integers(1, 5), st.integers(1, 3))
def test_standardise_coefficients_mean0_std1_and_masks(seed, b, t, a):
    """Over the real decisions the standardised credit has mean 0 and std 1; masked
    tokens stay 0; a token's offset from its decision's mean is scaled, not moved."""
    rng = np.random.default_rng(seed)
    # One [4, 5, 3] buffer (one compilation), its real extent b x t x a set by the masks.
    turn = (rng.random((4, 5)) < 0.7) & (np.arange(4)[:, None] < b) & (np.arange(5) < t)
    turn[0, 0] = True
    tok = (rng.random((4, 5, 3)) < 0.8) & turn[..., None] & (np.arange(3) < a)
    tok[0, 0, 0] = True
    coef = np.where(tok, rng.normal(size=(4, 5, 3)) * 3 + 1, 0.0).astype(np.float32)
    out = np.asarray(adv.standardise_coefficients(jnp.asarray(coef), jnp.asarray(turn),
                                                  jnp.asarray(tok)))
    assert np.all(out[~tok] == 0)
    live = turn & tok.any(-1)
    a_t = np.array([out[i, j][tok[i, j]].mean() for i, j in zip(*np.nonzero(live))])
    raw = np.array([coef[i, j][tok[i, j]].mean() for i, j in zip(*np.nonzero(live))])
    assert abs(a_t.mean()) < 1e-4
    if raw.std() > 1e-3:
        np.testing.assert_allclose(a_t.std(), 1.0, atol=1e-3)
        i, j = np.argwhere(live)[0]
        np.testing.assert_allclose(out[i, j][tok[i, j]] - a_t[0],
                                   (coef[i, j][tok[i, j]] - raw[0]) / raw.std(), atol=1e-3)
