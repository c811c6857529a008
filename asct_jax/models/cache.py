"""Preallocated key/value cache for incremental decoding (a pytree, passed in and returned)."""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from asct_jax.models.config import ModelConfig


@struct.dataclass
class KVCache:
    """Keys and values of the tokens seen so far, one buffer per layer.

    Slots are filled left to right, in lockstep for the whole batch; a slot whose
    token was padding has `mask` False and is never attended to.

    Attributes:
      k, v:    per layer, [B, K, T, D] (K = num_kv_heads, T = max_len, D = head_dim): heads
               before slots, the layout the attention's batched (B, K) dots read in place (a
               [B, T, K, D] buffer was transposed whole by XLA:CPU in every layer at every
               decoding step).
      mask:    [B, T] bool, slot holds a real (non-padding) token.
      lengths: [B] int32, real tokens so far = rotary position of the next real token.
      index:   [] int32, next slot to write.
    """

    k: Tuple[jax.Array, ...]
    v: Tuple[jax.Array, ...]
    mask: jax.Array
    lengths: jax.Array
    index: jax.Array

    @property
    def max_len(self) -> int:
        return self.mask.shape[1]


def init_cache(config: ModelConfig, batch: int, max_len: int) -> KVCache:
    """An empty cache for `batch` sequences of up to `max_len` tokens (prompt + generated)."""
    if max_len > config.max_seq_len:
        raise ValueError(f"init_cache: max_len={max_len} exceeds config.max_seq_len={config.max_seq_len}")
    shape = (batch, config.num_kv_heads, max_len, config.head_dim)
    zeros = lambda: jnp.zeros(shape, config.jnp_dtype)
    return KVCache(
        k=tuple(zeros() for _ in range(config.num_layers)),
        v=tuple(zeros() for _ in range(config.num_layers)),
        mask=jnp.zeros((batch, max_len), bool),
        lengths=jnp.zeros((batch,), jnp.int32),
        index=jnp.zeros((), jnp.int32),
    )


def write(buf: jax.Array, new: jax.Array, index: jax.Array) -> jax.Array:
    """Writes new [B, S, ...] into buf [B, T, ...] at slots [index, index + S)."""
    chex.assert_rank(index, 0)
    start = (0, index) + (0,) * (buf.ndim - 2)
    return jax.lax.dynamic_update_slice(buf, new.astype(buf.dtype), start)


def write_kv(buf: jax.Array, new: jax.Array, index: jax.Array) -> jax.Array:
    """Writes new keys or values [B, S, K, D] into buf [B, K, T, D] at slots [index, index + S)."""
    chex.assert_rank(index, 0)
    return jax.lax.dynamic_update_slice(buf, new.swapaxes(1, 2).astype(buf.dtype), (0, 0, index, 0))


def grow(cache: KVCache, extra: int, max_seq_len: int) -> KVCache:
    """The cache with `extra` empty slots appended (k / v zeros, mask False)."""
    if cache.max_len + extra > max_seq_len:
        raise ValueError(f"grow: max_len={cache.max_len + extra} exceeds config.max_seq_len={max_seq_len}")
    pad = lambda x: jnp.pad(x, ((0, 0), (0, 0), (0, extra), (0, 0)))
    return cache.replace(k=tuple(map(pad, cache.k)), v=tuple(map(pad, cache.v)),
                         mask=jnp.pad(cache.mask, ((0, 0), (0, extra))))


def pad_left(cache: KVCache, extra: int) -> KVCache:
    """The cache with `extra` empty slots (k / v zeros, mask False) before its own."""
    if not extra:
        return cache
    pad = lambda x: jnp.pad(x, ((0, 0), (0, 0), (extra, 0), (0, 0)))
    return cache.replace(k=tuple(map(pad, cache.k)), v=tuple(map(pad, cache.v)),
                         mask=jnp.pad(cache.mask, ((0, 0), (extra, 0))),
                         index=cache.index + extra)


def repeat(cache: KVCache, k: int) -> KVCache:
    """The cache with each sequence repeated k times in a row (batch B -> B k)."""
    rep = lambda x: jnp.repeat(x, k, axis=0)
    return cache.replace(k=tuple(map(rep, cache.k)), v=tuple(map(rep, cache.v)),
                         mask=rep(cache.mask), lengths=rep(cache.lengths))
