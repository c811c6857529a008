"""Which turns TAC restores: the authors' checkpoints (factor/tac.py, select_checkpoints).

Shapes: B episodes, T turns, two checkpoint slots per episode.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp


def checkpoint_turns(turn_mask: chex.Array, key: chex.PRNGKey
                     ) -> Tuple[chex.Array, chex.Array]:
    """The authors' checkpoints (factor/tac.py, select_checkpoints): for an episode of T_i
    turns, with h = floor(T_i / 2),

      T_i >= 4:      one turn uniform in the first half [0, h), one in the second [h, T_i)
                     (for odd T_i the second half is the longer: T_i = 5 -> {0, 1}, {2, 3, 4})
      1 < T_i < 4:   the midpoint h (slot 0; slot 1 invalid)
      T_i <= 1:      none

    The first half includes t = 0, whose potential is the group baseline: its target
    trains the critic but TAC never reads V(x_0).

    Args:
      turn_mask: [B, T] bool, prefix mask of real turns.
      key: PRNG key.
    Returns:
      (indices [B, 2] int32, valid [B, 2] bool): slot 0 in the first half (or the
      midpoint), slot 1 in the second half, so ascending; invalid slots hold index 0.
    """
    chex.assert_rank(turn_mask, 2)
    chex.assert_type(turn_mask, bool)
    n = jnp.sum(turn_mask, axis=-1, dtype=jnp.int32)  # T_i
    half = n // 2  # h = floor(T_i / 2)
    # Uniform draws in [0, h) and [h, T_i); the ranges are kept non-empty where unused.
    lo = jnp.stack([jnp.zeros_like(half), half], axis=-1)
    hi = jnp.stack([jnp.maximum(half, 1), jnp.maximum(n, half + 1)], axis=-1)
    draw = jax.random.randint(key, lo.shape, lo, hi, dtype=jnp.int32)
    long = n >= 4
    short = (n > 1) & (n < 4)
    first = jnp.where(long, draw[:, 0], jnp.where(short, half, 0))  # midpoint T_i // 2
    second = jnp.where(long, draw[:, 1], 0)
    valid = jnp.stack([long | short, long], axis=-1)
    return jnp.stack([first, second], axis=-1).astype(jnp.int32), valid
