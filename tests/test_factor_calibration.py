"""Calibration-turn sampling and MC value targets."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import masks_from_lengths

B, T, K = 4, 7, 3
sample = jax.jit(fj.calibration_turns, static_argnames="num_turns")


@given(st.lists(st.integers(0, T), min_size=B, max_size=B), st.integers(0, 2**31 - 1))
def test_never_picks_first_terminal_or_padded_turns(turns, seed):
    turn_mask, _ = masks_from_lengths(turns, np.ones((B, T), int), T, 1)
    idx, valid = sample(jnp.asarray(turn_mask), jax.random.key(seed), num_turns=K)
    idx, valid = np.asarray(idx), np.asarray(valid)
    for i, n in enumerate(turns):
        chosen = idx[i][valid[i]]
        assert np.all(chosen >= 1) and np.all(chosen <= n - 1)  # never 0, T_i or padding
        assert np.all(turn_mask[i, chosen])
        assert len(set(chosen.tolist())) == len(chosen) == min(K, max(n - 1, 0))
        assert np.all(np.diff(chosen) > 0) and np.all(idx[i][~valid[i]] == 0)
        assert np.all(valid[i][: len(chosen)])  # valid slots first


def test_uniform_among_intermediate_turns():
    turns = [7, 5, 2, 4]
    turn_mask, _ = masks_from_lengths(turns, np.ones((B, T), int), T, 1)
    keys = jax.random.split(jax.random.key(0), 4000)
    idx, valid = jax.vmap(lambda k: fj.calibration_turns(jnp.asarray(turn_mask), k, 2))(keys)
    sel = np.asarray(jax.vmap(lambda i, v: fj.calibration_mask(i, v, T))(idx, valid))
    freq = sel.mean(0)  # [B, T]
    for i, n in enumerate(turns):
        eligible = n - 1
        if eligible == 0:
            continue
        expected = min(2, eligible) / eligible
        np.testing.assert_allclose(freq[i, 1:n], expected, atol=0.035)
        assert freq[i, 0] == 0 and np.all(freq[i, n:] == 0)


def test_targets_scatter_mean_returns():
    idx = jnp.array([[1, 3], [2, 0]], jnp.int32)
    valid = jnp.array([[True, True], [True, False]])
    mc = jnp.array([[[1.0, 3.0], [0.0, 1.0]], [[5.0, 5.0], [9.0, 9.0]]])
    targets, mask = fj.calibration_targets(idx, valid, mc, 4)
    np.testing.assert_allclose(targets, [[0, 2.0, 0, 0.5], [0, 0, 5.0, 0]])
    np.testing.assert_array_equal(mask, [[0, 1, 0, 1], [0, 0, 1, 0]])


def test_bad_num_turns_raises():
    with pytest.raises(ValueError, match="num_turns"):
        fj.calibration_turns(jnp.ones((2, 3), bool), jax.random.key(0), 4)
