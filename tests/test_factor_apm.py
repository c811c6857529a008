"""APM: mean-1 weights for any scores and lengths, clipping, ablation modes, stability."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import masks_from_lengths, pad_batch

B, T, A = 3, 5, 6
CLIPS = [None, (0.8, 1.2), (0.0, 1.5), (0.5, None), (1.0, 1.0)]


@functools.partial(jax.jit, static_argnames=("tau", "transform", "clip"))
def apm(scores, mask, tau=1.0, transform="exp", clip=None):
    return fj.apm_weights(scores, mask, tau=tau, transform=transform, clip=clip)


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


def _check_mean_one(w, mask, atol=2e-6, positive=True):
    w = np.asarray(w, np.float64)
    length = mask.sum(-1)
    mean = w.sum(-1) / np.maximum(length, 1)
    np.testing.assert_allclose(mean[length > 0], 1.0, atol=atol)
    np.testing.assert_array_equal(w[~mask], 0.0)
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    if positive:  # strictly positive unless clip's lo = 0 lets a token reach 0
        assert np.all(w[mask] > 0)
    np.testing.assert_array_equal(w[mask & (length == 1)[..., None]], 1.0)


@pytest.mark.parametrize("clip", CLIPS)
@given(score_batches(), st.sampled_from([0.1, 1.0]))
def test_mean_one_for_any_scores_and_lengths(clip, batch, tau):
    scores, mask = batch
    w = apm(scores, mask, tau=tau, clip=clip)
    _check_mean_one(w, mask, positive=clip is None or (clip[0] or 0.0) > 0)
    conservation = np.asarray(fj.conservation_error(w, mask))
    assert conservation.max() <= 2e-6
    if clip is not None and mask.any():
        lo, hi = clip[0] or 0.0, clip[1] or np.inf
        wr = np.asarray(w)[mask]
        assert wr.min() >= lo * (1 - 1e-5) and wr.max() <= hi * (1 + 1e-5)


@pytest.mark.parametrize("transform", ["softplus", lambda z: jnp.maximum(z, 0.0)])
@given(score_batches())
def test_other_transforms_mean_one(transform, batch):
    scores, mask = batch
    _check_mean_one(apm(scores, mask, transform=transform), mask)


@given(score_batches())
def test_unclipped_ratios_follow_exp_scores(batch):
    scores, mask = batch
    scores = np.clip(scores, -5, 5)  # ratios representable in float32
    w = np.asarray(apm(scores, mask, tau=2.0), np.float64)
    s = scores.astype(np.float64)
    u = np.where(mask, np.exp(s / 2.0), 0.0)
    expected = mask.sum(-1, keepdims=True) * u / np.maximum(u.sum(-1, keepdims=True), 1e-300)
    np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-6)


@given(score_batches())
def test_clipped_weights_are_a_clipped_rescaling(batch):
    """omega' = clip(c omega, lo, hi): unclipped tokens keep their ratios, order is kept."""
    scores, mask = batch
    scores = np.clip(scores, -3, 3)
    w = np.asarray(apm(scores, mask))
    wc = np.asarray(apm(scores, mask, clip=(0.8, 1.2)))
    free = mask & (wc > 0.8 * (1 + 1e-5)) & (wc < 1.2 * (1 - 1e-5))
    ratio = np.where(free, wc / np.where(mask, w, 1.0), np.nan)
    spread = np.nanmax(ratio, -1) - np.nanmin(ratio, -1) if free.any() else np.zeros(1)
    assert np.all(np.nan_to_num(spread) <= 1e-4)
    for idx in zip(*np.nonzero(mask.sum(-1) > 1)):
        order = np.argsort(w[idx][mask[idx]], kind="stable")
        assert np.all(np.diff(wc[idx][mask[idx]][order]) >= -1e-6)


@given(score_batches())
def test_ablation_weights(batch):
    """softmax_weights sum to 1 (no APM); unnormalised_weights are u itself."""
    scores, mask = batch
    soft = np.asarray(jax.jit(fj.softmax_weights)(scores, mask), np.float64)
    length = mask.sum(-1)
    np.testing.assert_allclose(soft.sum(-1)[length > 0], 1.0, atol=2e-6)
    np.testing.assert_allclose(np.asarray(fj.conservation_error(soft.astype(np.float32), mask))
                               [length > 0], (1 - 1 / length)[length > 0], atol=2e-6)
    np.testing.assert_array_equal(soft[~mask], 0.0)
    assert np.all(soft[mask] > 0)
    raw = np.asarray(jax.jit(fj.unnormalised_weights)(scores, mask))
    expected = np.where(mask, np.exp(np.clip(scores, -fj.apm.MAX_LOG_U, fj.apm.MAX_LOG_U)), 0)
    np.testing.assert_allclose(raw, expected, rtol=1e-5)


@given(score_batches(), st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_result(batch, seed):
    scores, mask = batch
    turn_mask = mask.any(-1)
    padded = pad_batch({"scores": scores, "token_mask": mask, "turn_mask": turn_mask}, 2, 3,
                       np.random.default_rng(seed), garbage=None)
    for clip in (None, (0.8, 1.2)):
        w = apm(scores, mask, clip=clip)
        wp = apm(padded["scores"], padded["token_mask"], clip=clip)
        np.testing.assert_array_equal(wp[:, :T, :A], w)
        assert not np.any(wp[:, T:]) and not np.any(wp[..., A:])


def test_hand_case_and_one_token_action():
    s = jnp.array([[[0.0, np.log(3.0), 7.0], [5.0, -1.0, 2.0]]], jnp.float32)
    m = jnp.array([[[True, True, False], [True, False, False]]])
    np.testing.assert_allclose(fj.apm_weights(s, m), [[[0.5, 1.5, 0.0], [1.0, 0.0, 0.0]]],
                               rtol=1e-6)
    # clip to [0.6, 1.2]: c * (0.5, 1.5) -> (0.8, 1.2): mean 1 with the top token at hi.
    np.testing.assert_allclose(fj.apm_weights(s, m, clip=(0.6, 1.2)),
                               [[[0.8, 1.2, 0.0], [1.0, 0.0, 0.0]]], rtol=1e-6)


@pytest.mark.parametrize("tau", [1.0, 1e-3])
def test_extreme_scores_stay_finite_and_positive(tau):
    s = jnp.array([[[1e30, -1e30, 0.0, 3e38]]], jnp.float32)
    m = jnp.ones((1, 1, 4), bool)
    for clip in (None, (0.1, 1.1)):
        w = np.asarray(fj.apm_weights(s, m, tau=tau, clip=clip))
        assert np.all(np.isfinite(w)) and np.all(w > 0)
        np.testing.assert_allclose(w.mean(), 1.0, rtol=1e-6)


@pytest.mark.parametrize("kwargs, field", [
    ({"transform": "relu"}, "transform"),
    ({"tau": 0.0}, "tau"),
    ({"clip": (1.1, 2.0)}, "clip"),
    ({"clip": (0.5, 0.9)}, "clip"),
    ({"clip": 1.2}, "clip"),
])
def test_bad_config_raises_value_error_naming_the_field(kwargs, field):
    s, m = jnp.zeros((1, 1, 2)), jnp.ones((1, 1, 2), bool)
    with pytest.raises(ValueError, match=field):
        fj.apm_weights(s, m, **kwargs)
    if "clip" not in kwargs:
        for fn in (fj.softmax_weights, fj.unnormalised_weights):
            with pytest.raises(ValueError, match=field):
                fn(s, m, **kwargs)
