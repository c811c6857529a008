"""The columns a pass over padded token rows runs on: padding costs no pass.

Shapes are static under jit, so a pass over prompts padded to P columns runs on all P,
however short the rows (the generating actor's prompts hold 40-70 real tokens of P = 226
on shop). `on_columns` runs the pass on the fewest columns that hold every row's real
tokens, rounded up to one of a few static widths W = ceil(P i / BUCKETS), i = 1 ..
BUCKETS, by a lax.switch with one branch per width. The cut columns are padding, never
attended to, and the positions count real tokens only, so the pass's values are those on
all P columns up to float32 summation order.

The width is chosen by the longest row over every lane of the enclosing vmaps
(`lanes_max`), so a pass at a restored state (one row, vmapped over the states and the
continuations) still runs one branch for all lanes. Not for a differentiated pass: a
switch's linearisation keeps every branch's residuals.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax import custom_batching

BUCKETS = 3   # the static widths per P; 1: every pass on all P columns (read at trace time)


@custom_batching.custom_vmap
def lanes_max(x: jax.Array) -> jax.Array:
    """[] -> [] the max of x over every lane of the enclosing vmaps (x itself outside any).

    Under vmap the result is one value, not a batched one, so a lax.switch on it runs one
    branch for all lanes (a batched index runs every branch): a collective over the vmapped
    axes, as lax.pmax over a named axis, that needs no axis name."""
    return x


@lanes_max.def_vmap
def _lanes_max_vmap(axis_size, in_batched, x):
    return lanes_max(jnp.max(x, axis=0) if in_batched[0] else x), False


def widths(p: int, buckets: Optional[int] = None) -> tuple:
    """The static widths W a pass over P = p columns may run on: ceil(p i / buckets),
    i = 1 .. buckets (buckets None: BUCKETS)."""
    n = max(BUCKETS if buckets is None else buckets, 1)
    return tuple(sorted({-(-p * i // n) for i in range(1, n + 1)}))


def on_columns(fn: Callable, need: jax.Array, p: int, *operands,
               buckets: Optional[int] = None):
    """fn(W, *operands) for W the smallest of widths(p) >= need [] (lanes_max over the
    enclosing vmaps), one lax.switch branch per width; fn's outputs must not depend on W."""
    ws = widths(p, buckets)
    if len(ws) == 1:
        return fn(ws[0], *operands)
    branch = jnp.sum(jnp.asarray(ws) < lanes_max(need))        # the smallest W >= need
    return jax.lax.switch(branch, [functools.partial(fn, w) for w in ws], *operands)


def right_padded(fn: Callable, ids: jax.Array, pad_id: int, buckets: Optional[int] = None):
    """fn(ids[:, :W]): ids [N, P] right-padded (PAD after each row's tokens), W the
    smallest width holding every row up to its last non-PAD token."""
    p = ids.shape[1]
    need = jnp.max(jnp.where(ids != pad_id, jnp.arange(1, p + 1), 0))
    return on_columns(lambda w, x: fn(x[:, :w]), need, p, ids, buckets=buckets)


def left_padded(fn: Callable, ids: jax.Array, mask: jax.Array,
                buckets: Optional[int] = None):
    """fn(ids[:, P - W:], mask[:, P - W:]): ids, mask [N, P] (mask False = PAD), W the
    smallest width holding every row from its first real token on (a row's real tokens
    need not be contiguous)."""
    p = ids.shape[1]
    first = jnp.where(jnp.any(mask, axis=1), jnp.argmax(mask, axis=1), p)
    need = jnp.max(p - first)
    return on_columns(lambda w, x, m: fn(x[:, p - w:], m[:, p - w:]), need, p, ids, mask,
                      buckets=buckets)
