"""factor_jax.checkpoints' checkpoint turns against the FACTOR authors' code: their unit
tests' hand-worked numbers (re-derived here), and properties.
"""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj
from tests.helpers.factor_kernels import PROPS

checkpoints = jax.jit(fj.checkpoint_turns)


def _turn_mask(lengths, width):
    return jnp.arange(width)[None, :] < jnp.asarray(lengths)[:, None]


def test_checkpoint_turns_hand_cases():
    # 1 < T < 4: the midpoint T // 2 (T = 3 -> 1, T = 2 -> 1); T <= 1: none.
    idx, valid = checkpoints(_turn_mask([3, 2, 1, 0], 6), jax.random.PRNGKey(0))
    np.testing.assert_array_equal(idx, [[1, 0], [1, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(valid, [[True, False], [True, False], [False, False],
                                          [False, False]])
    # T >= 4: one in [0, T // 2), one in [T // 2, T), for T = 4, 5, 8, 17, 50; 25 draws.
    lengths = np.repeat(np.array([4, 5, 8, 17, 50]), 25)  # one batch of 25 copies each
    mask = _turn_mask(lengths, 50)
    idx, valid = checkpoints(mask, jax.random.PRNGKey(1))
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert valid.all()
    half = lengths // 2
    assert np.all(idx[..., 0] >= 0) and np.all(idx[..., 0] < half)
    assert np.all(idx[..., 1] >= half) and np.all(idx[..., 1] < lengths)
    # Odd T = 5 splits {0, 1} | {2, 3, 4}; every turn of each half is drawn.
    five = idx[lengths == 5]
    assert set(five[:, 0]) == {0, 1} and set(five[:, 1]) == {2, 3, 4}
    # Reproducible from the key, different for another.
    np.testing.assert_array_equal(checkpoints(mask, jax.random.PRNGKey(1))[0], idx)
    assert np.any(np.asarray(checkpoints(mask, jax.random.PRNGKey(2))[0]) != idx)


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_checkpoint_turns_properties(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, size=8)
    idx, valid = checkpoints(_turn_mask(lengths, 11), jax.random.PRNGKey(seed))
    idx, valid = np.asarray(idx), np.asarray(valid)
    assert idx.dtype == np.int32 and idx.shape == valid.shape == (8, 2)
    np.testing.assert_array_equal(valid[:, 0], lengths > 1)
    np.testing.assert_array_equal(valid[:, 1], lengths >= 4)
    np.testing.assert_array_equal(idx[~valid], 0)
    half = lengths // 2
    long, short = lengths >= 4, (lengths > 1) & (lengths < 4)
    assert np.all(idx[long, 0] < half[long]) and np.all(idx[long, 1] >= half[long])
    assert np.all(idx[long, 1] < lengths[long])
    np.testing.assert_array_equal(idx[short, 0], half[short])
