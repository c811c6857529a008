"""factor_jax.tac's warm-up credit against the FACTOR authors' code: their unit tests'
hand-worked numbers (re-derived here, in our layout: tests/helpers/factor_kernels.py), and
properties (it sums to A_seq).
"""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj
from tests.helpers.factor_kernels import B, PROPS, T, f32

warmup = jax.jit(fj.warmup_credit)


def test_warmup_credit_hand_case():
    """ALFWorld group (1, 0), K = 2: b = (0, 1), A_seq = (1, -1); two actions each ->
    A* = A_seq / 2 on every action."""
    _, a_seq, _ = fj.reward_construction(f32([1.0, 0.0]), 2, "leave_one_out")
    np.testing.assert_allclose(a_seq, [1.0, -1.0])
    turn_mask = jnp.array([[True, True, False], [True, True, False]])
    np.testing.assert_allclose(warmup(a_seq, turn_mask), [[0.5, 0.5, 0], [-0.5, -0.5, 0]])
    empty = warmup(f32([jnp.nan, 2.0]), jnp.array([[False] * 3, [True, False, False]]))
    np.testing.assert_array_equal(empty, [[0, 0, 0], [2.0, 0, 0]])


@PROPS
@given(st.integers(0, 2**31 - 1))
def test_warmup_credit_sums_to_a_seq(seed):
    rng = np.random.default_rng(seed)
    turns = rng.integers(0, T + 1, size=B)
    turn_mask = np.arange(T)[None, :] < turns[:, None]
    a_seq = f32(rng.normal(size=B))
    c = np.asarray(warmup(a_seq, jnp.asarray(turn_mask)))
    np.testing.assert_allclose(c.sum(-1), np.where(turns > 0, a_seq, 0.0), atol=1e-6)
    np.testing.assert_array_equal(c[~turn_mask], 0.0)
    live = turn_mask & (turns > 0)[:, None]
    np.testing.assert_allclose(c[live], np.broadcast_to(
        (np.asarray(a_seq) / np.maximum(turns, 1))[:, None], turn_mask.shape)[live], rtol=1e-6)
