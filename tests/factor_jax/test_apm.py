"""APM: mean-1 mixture weights for any scores and lengths; the ablations' weights
(softmax summing to 1, uniform). The authors' hand cases are in
tests/factor_jax/test_hta_authors.py."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import masks_from_lengths, pad_batch

B, T, A = 3, 5, 6


@functools.partial(jax.jit, static_argnames="tau")
def apm(scores, mask, eta, tau=1.0):
    return fj.apm_weights(scores, mask, eta, tau=tau)


@st.composite
def score_batches(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    turns = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    one_token = draw(st.booleans())
    scale = draw(st.sampled_from([1e-4, 1.0, 30.0, 1e4]))
    rng = np.random.default_rng(seed)
    lengths = np.ones((B, T), int) if one_token else rng.integers(1, A + 1, size=(B, T))
    turn_mask, token_mask = masks_from_lengths(turns, lengths, T, A)
    scores = (scale * rng.normal(size=(B, T, A))).astype(np.float32)
    return np.where(token_mask, scores, 0).astype(np.float32), token_mask


@given(score_batches(), st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from([0.1, 1.0]))
def test_mean_one_for_any_scores_and_lengths(batch, eta, tau):
    scores, mask = batch
    w = np.asarray(apm(scores, mask, eta, tau=tau), np.float64)
    length = mask.sum(-1)
    np.testing.assert_allclose((w.sum(-1) / np.maximum(length, 1))[length > 0], 1.0,
                               atol=2e-6)
    assert np.asarray(fj.conservation_error(jnp.asarray(w, jnp.float32), mask)).max() <= 2e-6
    np.testing.assert_array_equal(w[~mask], 0.0)
    assert np.all(np.isfinite(w)) and np.all(w[mask] >= 1.0 - eta - 1e-5)
    np.testing.assert_allclose(w[mask & (length == 1)[..., None]], 1.0, rtol=1e-6)


@given(score_batches())
def test_eta_one_is_the_softmax_times_length(batch):
    scores, mask = batch
    scores = np.clip(scores, -5, 5)  # ratios representable in float32
    w = np.asarray(apm(scores, mask, 1.0, tau=2.0), np.float64)
    u = np.where(mask, np.exp(scores.astype(np.float64) / 2.0), 0.0)
    expected = mask.sum(-1, keepdims=True) * u / np.maximum(u.sum(-1, keepdims=True), 1e-300)
    np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-6)


@given(score_batches(), st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_result(batch, seed):
    scores, mask = batch
    padded = pad_batch({"scores": scores, "token_mask": mask, "turn_mask": mask.any(-1)}, 2,
                       3, np.random.default_rng(seed), garbage=np.nan)
    for fn in (lambda s, m: apm(s, m, 0.5), jax.jit(fj.softmax_weights)):
        w, wp = fn(scores, mask), fn(padded["scores"], padded["token_mask"])
        np.testing.assert_array_equal(wp[:, :T, :A], w)
        assert not np.any(wp[:, T:]) and not np.any(wp[..., A:])


def test_hand_case():
    s = jnp.array([[[0.0, np.log(3.0), 7.0], [5.0, -1.0, 2.0]]], jnp.float32)
    m = jnp.array([[[True, True, False], [True, False, False]]])
    np.testing.assert_allclose(fj.apm_weights(s, m, 1.0), [[[0.5, 1.5, 0.0], [1.0, 0.0, 0.0]]],
                               rtol=1e-6)
    # eta = 0.5: omega = 0.5 + 0.5 * 2 * (1/4, 3/4).
    np.testing.assert_allclose(fj.apm_weights(s, m, 0.5), [[[0.75, 1.25, 0.0], [1.0, 0, 0]]],
                               rtol=1e-6)


@given(score_batches())
def test_softmax_ablation_sums_to_one(batch):
    """softmax_weights (no APM) sum to 1: the action mean is 1 / L_t."""
    scores, mask = batch
    soft = np.asarray(jax.jit(fj.softmax_weights)(scores, mask), np.float64)
    length = mask.sum(-1)
    np.testing.assert_allclose(soft.sum(-1)[length > 0], 1.0, atol=2e-6)
    np.testing.assert_allclose(np.asarray(fj.conservation_error(soft.astype(np.float32), mask))
                               [length > 0], (1 - 1 / length)[length > 0], atol=2e-6)
    np.testing.assert_array_equal(soft[~mask], 0.0)
    assert np.all(soft[mask] > 0)
    np.testing.assert_array_equal(fj.uniform_weights(mask), mask.astype(np.float32))


@pytest.mark.parametrize("tau", [1.0, 1e-3])
def test_extreme_scores_stay_finite_and_positive(tau):
    s = jnp.array([[[1e30, -1e30, 0.0, 3e38]]], jnp.float32)
    m = jnp.ones((1, 1, 4), bool)
    soft = np.asarray(fj.softmax_weights(s, m, tau=tau))
    assert np.all(np.isfinite(soft)) and np.all(soft > 0)
    np.testing.assert_allclose(soft.sum(), 1.0, rtol=1e-6)
    # APM reads HTA's scores, clipped to [-d, d] whatever delta is.
    w = np.asarray(fj.apm_weights(fj.hta_scores(s, jnp.ones((1, 1)), m), m, 0.7, tau=tau))
    assert np.all(np.isfinite(w)) and np.all(w >= 0.3 - 1e-6)
    np.testing.assert_allclose(w.mean(), 1.0, rtol=1e-6)


@pytest.mark.parametrize("kwargs, field", [({"tau": 0.0}, "tau"), ({"eta": 1.5}, "eta")])
def test_bad_config_raises_value_error_naming_the_field(kwargs, field):
    s, m = jnp.zeros((1, 1, 2)), jnp.ones((1, 1, 2), bool)
    with pytest.raises(ValueError, match=field):
        fj.apm_weights(s, m, **{"eta": 0.5, **kwargs})
    if field == "tau":
        with pytest.raises(ValueError, match=field):
            fj.softmax_weights(s, m, **kwargs)
