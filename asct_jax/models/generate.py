"""Batched generation with a KV cache, and scoring of given continuations.

Both take the model as an NNX module, split it, and run one jitted function per
input shape (the graph definition and the static options are the cache key), so
they also work when called inside the caller's own `jax.jit`.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from asct_jax.models import cache as cache_lib
from asct_jax.models import sampling, widths

PAD_ID = 0  # written into `tokens` after a row has stopped (its mask is False there).


class GenerateOutput(NamedTuple):
    """tokens [B, N] int32; logp [B, N] float32; mask [B, N] bool (True up to and incl. a stop token)."""

    tokens: jax.Array
    logp: jax.Array
    mask: jax.Array


def last_valid_index(mask: jax.Array) -> jax.Array:
    """[B, S] bool -> [B] int32 index of the last True (S - 1 for an all-False row)."""
    s = mask.shape[1]
    return (s - 1 - jnp.argmax(mask[:, ::-1], axis=1)).astype(jnp.int32)


def generate(model, prompt_ids, prompt_mask, key, *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, stop_tokens: Sequence[int] = (),
             prefill_buckets: Optional[int] = None) -> GenerateOutput:
    """Samples up to `max_new_tokens` tokens after left- or right-padded prompts.

    Args:
      model: a `Decoder`.
      prompt_ids: [B, P] int; prompt_mask: [B, P] bool (False = padding).
      key: PRNG key. temperature, top_p: floats (traced: changing them does not recompile).
      greedy, stop_tokens, max_new_tokens: static.
      prefill_buckets: static, `prefill`'s widths (None: widths.BUCKETS, read at the call).
    Returns:
      GenerateOutput; logp is the model's log-probability of each token at temperature 1
      (the same quantity `score` returns), 0 where mask is False. A row stops after
      emitting a stop token (kept, mask True); the loop exits early once all rows stopped.
    """
    graphdef, state = nnx.split(model)
    return _generate(graphdef, state, jnp.asarray(prompt_ids, jnp.int32), jnp.asarray(prompt_mask, bool), key,
                     jnp.float32(temperature), jnp.float32(top_p), max_new_tokens=int(max_new_tokens),
                     greedy=bool(greedy), stop_tokens=tuple(int(t) for t in stop_tokens),
                     prefill_buckets=int(widths.BUCKETS if prefill_buckets is None
                                         else prefill_buckets))


def prefill(model, prompt_ids, prompt_mask, max_new_tokens: int,
            buckets: Optional[int] = None):
    """The prompt pass of `generate` (the benchmark times it alone), on the prompt's last W
    columns that hold every row's real tokens (asct_jax.models.widths: left padding costs
    no pass; buckets None: widths.BUCKETS).

    Returns (cache with the prompt in slots [0, P) and room for max_new_tokens more,
    logits [B, V] float32 of each row's first new token).
    """
    p = prompt_ids.shape[1]

    def on(ids, mask):
        cache, last = prompt_pass(model, ids, mask, max_new_tokens, pad_to=p)
        return cache, model.logits(last)
    return widths.left_padded(on, prompt_ids, prompt_mask, buckets)


def prompt_pass(model, ids, mask, max_new_tokens: int, pad_to: int = 0):
    """The prompt pass on ids, mask [B, W] -> (cache with the prompt in slots [0, W) and
    room for max_new_tokens more, hidden [B, H] of each row's last real token). pad_to > W:
    the cache's prompt slots padded on the left to pad_to (empty: mask False)."""
    b, width = ids.shape
    # The prompt attends over its own slots (not W + N, most of them empty: 20 % of the
    # prompt's attention at P 256, N 64); the N slots are appended after.
    cache = cache_lib.init_cache(model.config, b, width)
    hidden, cache = model.hidden_states(ids, mask, cache=cache)
    cache = cache_lib.grow(cache_lib.pad_left(cache, max(pad_to - width, 0)),
                           max_new_tokens, model.config.max_seq_len)
    last = jnp.take_along_axis(hidden, last_valid_index(mask)[:, None, None], axis=1)[:, 0]
    return cache, last


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "greedy", "stop_tokens",
                                             "prefill_buckets"))
def _generate(graphdef, state, prompt_ids, prompt_mask, key, temperature, top_p, *, max_new_tokens,
              greedy, stop_tokens, prefill_buckets=None):
    model = nnx.merge(graphdef, state)
    chex.assert_rank([prompt_ids, prompt_mask], 2)
    chex.assert_equal_shape([prompt_ids, prompt_mask])
    # Prompt pass and decoding on the prompt's last W columns (models.widths): the cache
    # holds W + N slots, not P + N.
    return widths.left_padded(
        lambda ids, mask: _sample(model, ids, mask, key, temperature, top_p, max_new_tokens,
                                  greedy, stop_tokens),
        prompt_ids, prompt_mask, prefill_buckets)


def _sample(model, prompt_ids, prompt_mask, key, temperature, top_p, n, greedy, stop_tokens):
    """`_generate` on prompts [B, W] -> GenerateOutput [B, n]."""
    b = prompt_ids.shape[0]
    cache, last = prompt_pass(model, prompt_ids, prompt_mask, n)
    logits = model.logits(last)
    stops = jnp.asarray(stop_tokens, jnp.int32)
    blocks = model.layer_blocks()   # sliced once, not at every step

    def cond(carry):
        i, _, _, done, _, _ = carry
        return (i < n) & ~jnp.all(done)

    def body(carry):
        i, cache, logits, done, key, out = carry
        key, sub = jax.random.split(key)
        tok = sampling.sample_tokens(sub, logits, temperature, top_p, greedy)
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), tok[:, None], axis=-1)[:, 0]
        valid = ~done
        tok = jnp.where(valid, tok, PAD_ID)
        out = GenerateOutput(out.tokens.at[:, i].set(tok), out.logp.at[:, i].set(jnp.where(valid, lp, 0.0)),
                             out.mask.at[:, i].set(valid))
        if stop_tokens:
            done = done | (valid & jnp.isin(tok, stops))
        hidden, cache = model.hidden_states(tok[:, None], valid[:, None], cache=cache,
                                            blocks=blocks)
        return i + 1, cache, model.logits(hidden[:, 0]), done, key, out

    out = GenerateOutput(jnp.full((b, n), PAD_ID, jnp.int32), jnp.zeros((b, n), jnp.float32),
                         jnp.zeros((b, n), bool))
    init = (jnp.int32(0), cache, logits, jnp.zeros((b,), bool), key, out)
    return jax.lax.while_loop(cond, body, init)[-1]


def score(model, prefix_ids, prefix_mask, cont_ids, cont_mask) -> jax.Array:
    """log pi(cont_t | prefix, cont_<t) for each continuation token, batched.

    Args:
      prefix_ids, prefix_mask: [B, P] (left- or right-padded; mask False = padding).
      cont_ids, cont_mask: [B, C]; masked-out continuation tokens are ignored by attention.
    Returns:
      logp [B, C] float32, 0 where cont_mask is False. Differentiable w.r.t. the parameters.
    """
    graphdef, state = nnx.split(model)
    return _score(graphdef, state, jnp.asarray(prefix_ids, jnp.int32), jnp.asarray(prefix_mask, bool),
                  jnp.asarray(cont_ids, jnp.int32), jnp.asarray(cont_mask, bool))


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _score(graphdef, state, prefix_ids, prefix_mask, cont_ids, cont_mask):
    model = nnx.merge(graphdef, state)
    chex.assert_equal_shape([prefix_ids, prefix_mask])
    chex.assert_equal_shape([cont_ids, cont_mask])
    chex.assert_equal_shape_prefix([prefix_ids, cont_ids], 1)
    p = prefix_ids.shape[1]
    ids = jnp.concatenate([prefix_ids, cont_ids], axis=1)
    mask = jnp.concatenate([prefix_mask, cont_mask], axis=1)
    hidden, _ = model.hidden_states(ids, mask)
    # The prediction of token j comes from the last real token before j.
    slot = jnp.where(mask, jnp.arange(ids.shape[1]), -1)
    prev = jax.lax.cummax(slot, axis=1)[:, p - 1:-1]                                # [B, C]
    h = jnp.take_along_axis(hidden, jnp.maximum(prev, 0)[..., None], axis=1)        # [B, C, H]
    logp = jax.nn.log_softmax(model.logits(h), axis=-1)
    logp = jnp.take_along_axis(logp, cont_ids[..., None], axis=-1)[..., 0]
    return jnp.where(cont_mask & (prev >= 0), logp, 0.0)
