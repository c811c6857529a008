"""Padding of token rows: where PAD goes in a [..., L] row of ids.

The decoder reads a prefix left-padded (`left_align`, the real tokens at the end, so
the action follows them); prompts and responses built by concatenating pieces are
compacted to the left (`pads_to_right`, right-padded) before that. Pure functions of
(tokens, pad_id); every row is independent.
"""
from __future__ import annotations

import chex
import jax.numpy as jnp

from asct_jax.envs.base import PAD_ID


def left_align(tokens: chex.Array, pad_id: int = PAD_ID) -> chex.Array:
    """Moves PAD to the left of each row: [..., L] right-padded -> left-padded."""
    length = tokens.shape[-1]
    n_real = jnp.sum(tokens != pad_id, axis=-1, keepdims=True)
    idx = (jnp.arange(length) + n_real) % length
    # Row i: position p holds tokens[(p + n_real) % L]; for right-padded rows this puts
    # the n_real real tokens at the end, in order, with PAD before them.
    return jnp.take_along_axis(tokens, jnp.broadcast_to(idx, tokens.shape), axis=-1)


def pads_to_right(tokens: chex.Array, pad_id: int = PAD_ID) -> chex.Array:
    """Stable-compacts non-PAD tokens to the left (so left_align can re-pad them)."""
    is_real = tokens != pad_id
    order = jnp.argsort(~is_real, axis=-1, stable=True)
    return jnp.take_along_axis(tokens, order, axis=-1)
