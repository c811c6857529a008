"""Value calibration for TAC: which turns to restore and roll out, and their MC targets.

Pick a few intermediate turns per trajectory, restore the environment at x_t, roll pi_old
out M times to the end and regress V_psi(x_t) on the mean return-to-go. Only states
x_1 .. x_{T_i - 1} need V_psi: x_0 uses the group baseline and x_{T_i} (terminal) is 0.
Shapes: B episodes, T turns, K calibration turns per episode, M rollouts per turn.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp


def calibration_turns(turn_mask: chex.Array, key: chex.PRNGKey,
                      num_turns: int) -> Tuple[chex.Array, chex.Array]:
    """Samples up to `num_turns` intermediate turns per episode, uniformly, no replacement.

    Eligible turns of episode i: 1 <= t <= T_i - 1 with turn_mask[i, t] (never t = 0,
    whose potential is the baseline b, never the terminal index T_i, never padding).
    Sampling is the Gumbel-top-k trick with uniform keys: the top-K of i.i.d. uniforms over
    the eligible set is a uniform K-subset. An episode with fewer than K eligible turns gets
    all of them, and the remaining slots are invalid.

    Args:
      turn_mask: [B, T] bool, prefix mask of real turns.
      key: PRNG key.
      num_turns: K, 1 <= K <= T (static).
    Returns:
      (indices [B, K] int32, valid [B, K] bool): chosen turns in ascending order first,
      invalid slots last with index 0 (always read indices together with valid).
    """
    chex.assert_rank(turn_mask, 2)
    chex.assert_type(turn_mask, bool)
    num_steps = turn_mask.shape[1]
    if not (isinstance(num_turns, int) and 1 <= num_turns <= num_steps):
        raise ValueError(f"num_turns must be an int in [1, T={num_steps}], got {num_turns!r}")
    t = jnp.arange(num_steps)[None, :]
    eligible = turn_mask & (t >= 1)
    u = jax.random.uniform(key, turn_mask.shape)
    keys = jnp.where(eligible, u, -1.0)  # ineligible turns rank below every eligible one
    top_keys, idx = jax.lax.top_k(keys, num_turns)
    valid = top_keys >= 0.0
    order = jnp.argsort(jnp.where(valid, idx, num_steps + idx), axis=-1)  # ascending, valid first
    idx = jnp.take_along_axis(idx, order, axis=-1)
    valid = jnp.take_along_axis(valid, order, axis=-1)
    return jnp.where(valid, idx, 0).astype(jnp.int32), valid


def calibration_mask(indices: chex.Array, valid: chex.Array, num_steps: int) -> chex.Array:
    """[B, T] bool: the turns chosen by calibration_turns."""
    chex.assert_equal_shape([indices, valid])
    onehot = jax.nn.one_hot(indices, num_steps, dtype=jnp.bool_) & valid[..., None]
    return jnp.any(onehot, axis=1)


def calibration_targets(indices: chex.Array, valid: chex.Array, mc_returns: chex.Array,
                        num_steps: int) -> Tuple[chex.Array, chex.Array]:
    """Monte-Carlo value targets at the calibration turns.

      target(x_t) = (1/M) sum_m sum_{t' >= t} r^{(m)}_{t'}   (return-to-go of rollout m
                                                              of pi_old from restored x_t)
    Args:
      indices, valid: [B, K] from calibration_turns.
      mc_returns: [B, K, M] float, return-to-go of each rollout from x_t (rewards before
        t excluded).
      num_steps: T.
    Returns:
      (targets [B, T] float, target_mask [B, T] bool); 0 / False off the chosen turns.
    """
    chex.assert_rank([indices, valid, mc_returns], [2, 2, 3])
    chex.assert_type(mc_returns, float)
    chex.assert_equal_shape_prefix([indices, valid, mc_returns], 2)
    mean = jnp.where(valid, jnp.mean(mc_returns, axis=-1), 0.0)
    onehot = jax.nn.one_hot(indices, num_steps, dtype=mean.dtype) * valid[..., None]
    targets = jnp.einsum("bk,bkt->bt", mean, onehot)
    return targets, calibration_mask(indices, valid, num_steps)
