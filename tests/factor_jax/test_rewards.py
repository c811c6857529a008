"""factor_jax.rewards' reward construction (leave-one-out, standardise, raw) against the
FACTOR authors' code: their unit tests' hand-worked numbers (re-derived here, in our layout:
tests/helpers/factor_kernels.py), and properties (the group identities; a TAC credit built
on the construction telescopes to A_seq).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import masks_from_lengths
from tests.helpers.factor_kernels import PROPS, T, f32

construct = jax.jit(fj.reward_construction, static_argnums=(1, 2))


def test_rewards_leave_one_out_hand_case():
    g = f32([1, 1, 0, 0])  # one group of K = 4, sum 2: b_i = (2 - G_i) / 3
    terminal, a_seq, base = fj.reward_construction(g, 4, "leave_one_out")
    b = (2.0 - np.array([1, 1, 0, 0])) / 3.0
    np.testing.assert_allclose(base, b, rtol=1e-6)
    np.testing.assert_allclose(a_seq, np.array([1, 1, 0, 0]) - b, rtol=1e-6)
    np.testing.assert_array_equal(terminal, g)  # the raw success is the terminal reward
    # K = 1: no baseline.
    terminal, a_seq, base = fj.reward_construction(f32([1, 0]), 1, "leave_one_out")
    np.testing.assert_array_equal(base, 0.0)
    np.testing.assert_array_equal(a_seq, [1, 0])


def test_rewards_standardise_hand_case():
    scores = np.array([0.5, 0.7, 0.9, 0.1])
    terminal, a_seq, base = fj.reward_construction(f32(scores), 4, "standardise")
    expected = (scores - scores.mean()) / (scores.std() + 1e-8)  # population std
    np.testing.assert_allclose(a_seq, expected, rtol=1e-5)
    np.testing.assert_array_equal(terminal, a_seq)  # the terminal reward IS A_seq
    np.testing.assert_array_equal(base, 0.0)
    # sigma < 1e-6: A_seq = 0 for the whole group (the other group is untouched).
    g = f32([0.42, 0.42, 0.42, 0.42, 0.0, 1.0, 0.0, 1.0])
    _, a_seq, _ = fj.reward_construction(g, 4, "standardise")
    np.testing.assert_array_equal(a_seq[:4], 0.0)
    np.testing.assert_allclose(a_seq[4:], [-1, 1, -1, 1], rtol=1e-6)


def test_rewards_raw_hand_case():
    g = f32([1, 0, 1, 0])
    terminal, a_seq, base = fj.reward_construction(g, 4, "raw")
    np.testing.assert_array_equal(a_seq, g)
    np.testing.assert_array_equal(terminal, g)
    np.testing.assert_array_equal(base, 0.0)


def test_rewards_bad_arguments():
    with pytest.raises(ValueError, match="rule.*leave_one_out.*standardise.*raw"):
        fj.reward_construction(f32([1, 0]), 2, "alfworld")
    with pytest.raises(ValueError, match="group_size"):
        fj.reward_construction(f32([1, 0, 1]), 2, "raw")


def test_rewards_jit_and_telescoping_with_tac():
    """A TAC credit built on the construction sums to A_seq plus the step rewards before the
    last turn for every rule (the trainer's rewards = action_rewards; rewards[-1] =
    terminal; V~(x_0) = baseline); to A_seq without step rewards."""
    rng = np.random.default_rng(0)
    g = f32(rng.random(8))
    turn_mask, _ = masks_from_lengths([3, 1, 5, 2, 4, 5, 1, 3], np.ones((8, T), int), T, 1)
    last = np.arange(T)[None, :] == turn_mask.sum(-1)[:, None] - 1
    values = f32(rng.normal(size=(8, T)))
    env_r = f32(rng.normal(size=(8, T)))
    steps = np.where(turn_mask & ~last, env_r, 0.0).sum(-1)
    for rule in fj.REWARD_RULES:
        terminal, a_seq, base = construct(g, 4, rule)
        mask = jnp.asarray(turn_mask)
        for mode, extra in (("keep", steps), ("zero", 0.0)):
            rewards = fj.tac_rewards(env_r, terminal, mask, mode)
            credit = fj.tac_credit(rewards, values, base, mask)
            np.testing.assert_allclose(credit.sum(-1), a_seq + extra, atol=1e-5)


@PROPS
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 3),
       st.booleans())
def test_rewards_group_identities(seed, k, groups, binary):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 2, size=groups * k) if binary else rng.normal(size=groups * k)
    g = np.asarray(g, np.float32)
    gg = g.reshape(groups, k).astype(np.float64)
    _, a_std, _ = construct(f32(g), k, "standardise")
    sums = np.asarray(a_std, np.float64).reshape(groups, k).sum(-1)
    np.testing.assert_allclose(sums, 0.0, atol=1e-4)  # also 0 for a degenerate group
    terminal, a_loo, base = construct(f32(g), k, "leave_one_out")
    if k > 1:  # a_seq = (K / (K - 1)) (G - mean)
        expected = k / (k - 1) * (gg - gg.mean(-1, keepdims=True))
        np.testing.assert_allclose(np.asarray(a_loo).reshape(groups, k), expected,
                                   atol=1e-5)
    np.testing.assert_allclose(np.asarray(terminal) - np.asarray(base), a_loo, atol=1e-6)
