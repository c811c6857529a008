"""How an update splits a batch into minibatches (asct_jax.rl.protocol.Protocol).

Two units, as the authors do it:
* episodes: a random permutation of the B episodes cut into M equal minibatches (every
  per-episode leaf [B, ...] is cut along its first axis);
* steps: verl-agent's step samples. Each real turn is one sample: every [B, T, ...] leaf
  becomes [B * T, 1, ...] (a one-turn "episode" per turn row), a [B, ...] leaf is repeated
  per turn, then the rows are permuted with the real turns first (in random order) and
  cut into M = ceil(B * T / size) minibatches of min(size, B * T) rows (rows past B * T
  are padding, masked out: a batch smaller than `size` is one minibatch of its own B * T
  rows, never padded up to `size`); a minibatch with no real turn is empty and its update
  is skipped (`has_real_turns`), so the step makes ceil(real turns / size) updates, as
  verl-agent.

Scalars (ndim 0) are the same in every minibatch: broadcast to [M].
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _broadcast_scalar(x, m: int):
    return jnp.broadcast_to(x, (m,) + x.shape)


def split_episodes(tree: Any, key, count: int, batch: int) -> Any:
    """Every [B, ...] leaf -> [count, B / count, ...] along a random permutation of B."""
    perm = jax.random.permutation(key, batch)

    def cut(x):
        if x.ndim == 0:
            return _broadcast_scalar(x, count)
        x = jnp.take(x, perm, axis=0)
        return x.reshape((count, batch // count) + x.shape[1:])
    return jax.tree.map(cut, tree)


def to_turn_rows(tree: Any, batch: int, turns: int) -> Any:
    """[B, T, ...] leaves -> [B * T, 1, ...]; other [B, ...] leaves repeated per turn ->
    [B * T, ...]; scalars kept."""

    def rows(x):
        if x.ndim >= 2 and x.shape[:2] == (batch, turns):
            return x.reshape((batch * turns, 1) + x.shape[2:])
        if x.ndim >= 1:
            return jnp.repeat(x, turns, axis=0)
        return x
    return jax.tree.map(rows, tree)


def split_turn_rows(tree: Any, key, turn_mask, size: int) -> Any:
    """A tree of turn rows (`to_turn_rows`) -> [M, S, ...] minibatches, real turns first:
    S = min(size, B * T), M = ceil(B * T / size) (Protocol.minibatch_count).

    turn_mask: [B, T] bool, the real turns (row r = (b, t) in row-major order).
    """
    real = turn_mask.reshape(-1)
    rows = real.shape[0]
    # A minibatch never needs more rows than the batch has: padding rows would each cost
    # a decoder pass (and its saved activations) for nothing; M is unchanged.
    size = min(size, rows)
    count = -(-rows // size)
    u = jax.random.uniform(key, (rows,))
    order = jnp.argsort(jnp.where(real, u, 1.0 + u))           # real rows first, shuffled
    order = jnp.concatenate([order, jnp.full((count * size - rows,), rows, order.dtype)])

    def cut(x):
        if x.ndim == 0:
            return _broadcast_scalar(x, count)
        x = jnp.take(x, order, axis=0, mode="fill", fill_value=0)   # padding rows: 0 / False
        return x.reshape((count, size) + x.shape[1:])
    return jax.tree.map(cut, tree)


def has_real_turns(turn_mask) -> jax.Array:
    """[] bool: the minibatch holds a real turn (else its update is skipped)."""
    return jnp.any(turn_mask)
