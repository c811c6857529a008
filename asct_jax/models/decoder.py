"""Llama / Qwen2 decoder-only transformer (Flax NNX) with a value head.

The module holds parameters only; the KV cache is passed in and returned, so
`nnx.merge(graphdef, state)(...)` works inside `jax.jit`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from asct_jax.models import cache as cache_lib
from asct_jax.models import layers
from asct_jax.models.config import ModelConfig

# False: the passes without a cache run the layers as an unrolled Python loop (XLA compiles L
# copies of the block), the reference of the parity tests and of experiments.bench.compile.
SCAN_LAYERS = True


def default_positions(mask: jax.Array, start: Optional[jax.Array] = None) -> jax.Array:
    """Rotary positions [B, S]: start + cumsum(mask) - 1, clipped at 0 (left padding works)."""
    pos = jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1
    if start is not None:
        pos = pos + start[:, None]
    return jnp.maximum(pos, 0)


def stack_blocks(blocks) -> layers.Block:
    """One Block whose every variable is the L `blocks`' stacked [L, ...] (layer i at
    index i): the decoder's layout of its layers."""
    graphdef, _ = nnx.split(blocks[0])
    return nnx.merge(graphdef, jax.tree.map(lambda *w: jnp.stack(w),
                                            *[nnx.split(b)[1] for b in blocks]))


class Decoder(nnx.Module):
    """Token embedding -> L x Block -> RMSNorm -> (tied or untied) LM head, plus a value head.

    `layers` is one Block whose weights are the L layers' stacked [L, ...] (parameter
    paths "layers/self_attn/q_proj/kernel", ...); `stack_blocks` builds it."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embed_tokens = nnx.Embed(
            config.vocab_size, config.hidden_size, dtype=config.jnp_dtype,
            param_dtype=config.jnp_param_dtype,
            embedding_init=nnx.initializers.normal(layers.INIT_STD), rngs=rngs)
        # The L blocks are initialised one after another (the random draws of a per-layer
        # module list) and stored stacked: every weight of `layers` is [L, ...].
        self.layers = stack_blocks([layers.Block(config, rngs=rngs)
                                    for _ in range(config.num_layers)])
        self.norm = layers.rms_norm(config, rngs=rngs)
        self.lm_head = (None if config.tie_embeddings else
                        layers.dense(config, config.hidden_size, config.vocab_size, bias=False, rngs=rngs))
        self.value_head = nnx.Linear(config.hidden_size, 1, dtype=jnp.float32, param_dtype=jnp.float32,
                                     kernel_init=nnx.initializers.zeros, rngs=rngs)

    def hidden_states(
        self,
        input_ids: jax.Array,
        attention_mask: Optional[jax.Array] = None,
        positions: Optional[jax.Array] = None,
        cache: Optional[cache_lib.KVCache] = None,
        blocks: Optional[Sequence[layers.Block]] = None,
    ) -> Tuple[jax.Array, Optional[cache_lib.KVCache]]:
        """Final-norm hidden states [B, S, H] (compute dtype) and the updated cache (or None).

        input_ids [B, S] int; attention_mask [B, S] bool (False = padding, never attended to);
        positions [B, S] int, default `default_positions(mask, cache.lengths)`.
        With a cache, the S tokens go to slots [cache.index, cache.index + S), which must fit.
        blocks: `layer_blocks()` taken once outside a decoding loop (a decoding step's
        layers read them instead of slicing the stacked weights at every step).
        """
        chex.assert_rank(input_ids, 2)
        b, s = input_ids.shape
        mask = jnp.ones((b, s), bool) if attention_mask is None else attention_mask.astype(bool)
        chex.assert_shape(mask, (b, s))
        if cache is None:
            key_mask = mask
            query_slot = jnp.arange(s)
            if positions is None:
                positions = default_positions(mask)
        else:
            chex.assert_shape(cache.mask, (b, None))
            key_mask = cache_lib.write(cache.mask, mask, cache.index)
            query_slot = cache.index + jnp.arange(s)
            if positions is None:
                positions = default_positions(mask, cache.lengths)
        chex.assert_shape(positions, (b, s))
        causal = jnp.arange(key_mask.shape[1])[None, :] <= query_slot[:, None]  # [S, T]
        attn_mask = causal[None] & key_mask[:, None, :]                          # [B, S, T]
        cos, sin = layers.rope_tables(positions, self.config.head_dim, self.config.rope_theta)

        x = self.embed_tokens(input_ids)
        if cache is None:
            run = self._scan_blocks if SCAN_LAYERS else self._unrolled_blocks
            return self.norm(run(x, cos, sin, attn_mask)), None
        x, kv = self._cached_blocks(x, cos, sin, attn_mask, (cache.k, cache.v), cache.index,
                                    blocks)
        hidden = self.norm(x)
        new_cache = cache.replace(
            k=kv[0], v=kv[1], mask=key_mask,
            lengths=cache.lengths + mask.sum(axis=1, dtype=jnp.int32), index=cache.index + s)
        return hidden, new_cache

    def _scan_blocks(self, x, cos, sin, attn_mask):
        """The L blocks as one lax.scan over the stacked weights (the passes without a
        cache: training, scoring): XLA compiles one block, not L, and the gradients and
        optimiser updates stay one [L, ...] array per weight. x [B, S, H] -> [B, S, H].

        With config.remat each step runs under jax.checkpoint: the backward pass keeps only
        the L block inputs and recomputes one block's activations at a time. (A Python loop
        of checkpointed blocks did not: XLA:CPU scheduled every recomputation ahead of the
        backward pass, and the peak grew with the layers as without remat: 6.75 vs
        7.14 GiB at 30 layers, batch 4 x 558 tokens.)
        """
        graphdef, stacked = nnx.split(self.layers)

        def block(h, weights):
            return nnx.merge(graphdef, weights)(h, cos, sin, attn_mask)[0], None
        if self.config.remat:
            block = jax.checkpoint(block)
        return jax.lax.scan(block, x, stacked)[0]

    def layer_blocks(self) -> Tuple[layers.Block, ...]:
        """The L layers as Blocks of their own weights (slices of the stacked ones): for the
        passes that loop over the layers. A decoding loop takes them once, before it, so
        that its steps do not copy the weights (XLA:CPU left the slices in the loop:
        SmolLM2's `generate` 1.3-1.6x slower)."""
        graphdef, stacked = nnx.split(self.layers)
        return tuple(nnx.merge(graphdef, jax.tree.map(lambda w: w[i], stacked))
                     for i in range(self.config.num_layers))

    def _unrolled_blocks(self, x, cos, sin, attn_mask):
        """`_scan_blocks` as a Python loop over the layers (SCAN_LAYERS = False; remat
        training scans either way): the parity tests' and bench_compile's reference."""
        if self.config.remat:
            return self._scan_blocks(x, cos, sin, attn_mask)
        for block in self.layer_blocks():
            x = block(x, cos, sin, attn_mask)[0]
        return x

    def _cached_blocks(self, x, cos, sin, attn_mask, kv, index, blocks=None):
        """The passes with a cache. x [B, S, H]; kv: the cache's (k, v), L buffers
        [B, K, T, D] each. -> (x, the updated (k, v)).

        One token (S = 1: a decoding step): a Python loop over the layers, each writing its
        own buffers in place. (Scanned, the cache is the scan's input and
        output: a copy of the whole cache at every step, 1.6-1.8x the time of SmolLM2's
        `generate`.) More tokens (a prompt's prefill, candidates scored against a cached
        prompt, which label_score "mean" differentiates): one lax.scan over the stacked
        weights and the cache's buffers stacked [L, ...] for it, a copy the S tokens'
        pass amortises (SCAN_LAYERS = False: the loop).
        """
        if x.shape[1] == 1 or not SCAN_LAYERS:
            new_k, new_v = [], []
            blocks = blocks or self.layer_blocks()
            for i, block in enumerate(blocks):
                x, (k, v) = block(x, cos, sin, attn_mask, (kv[0][i], kv[1][i]), index)
                new_k.append(k)
                new_v.append(v)
            return x, (tuple(new_k), tuple(new_v))
        graphdef, stacked = nnx.split(self.layers)

        def block(h, xs):
            weights, layer_kv = xs
            return nnx.merge(graphdef, weights)(h, cos, sin, attn_mask, layer_kv, index)
        x, (k, v) = jax.lax.scan(block, x, (stacked, (jnp.stack(kv[0]), jnp.stack(kv[1]))))
        return x, (tuple(k), tuple(v))

    def logits(self, hidden: jax.Array) -> jax.Array:
        """LM head: hidden [..., H] -> logits [..., V] float32."""
        # On [N, H] rather than [B, S, H] (see `layers.MLP`): from 3-D hidden states XLA:CPU
        # takes the head's weight gradient from a transposed [V, B*S] copy of the logits'
        # gradient, written strided in the softmax-backward fusion (1.3 s of SmolLM2's
        # [8, 128] training pass; head + cross-entropy forward and backward 3.0 s -> 1.8 s).
        # Same values up to float32 summation order.
        h2 = hidden.reshape(-1, hidden.shape[-1])
        if self.lm_head is None:
            out = self.embed_tokens.attend(h2.astype(self.config.jnp_dtype))
        else:
            out = self.lm_head(h2)
        return out.reshape(hidden.shape[:-1] + (out.shape[-1],)).astype(jnp.float32)

    def head_rows(self, tokens: jax.Array) -> Tuple[jax.Array, Optional[jax.Array]]:
        """The LM head's rows of `tokens` [...] -> (rows [..., H] compute dtype, bias [...]
        or None): logits(h)[..., v] = h . rows[v] (+ bias[v]). Scoring a few candidate
        tokens from hidden states this way costs O(H) per token instead of O(V H)."""
        if self.lm_head is None:
            table = self.embed_tokens.embedding[...]
        else:
            table = self.lm_head.kernel[...].T
        rows = jnp.take(table, tokens, axis=0).astype(self.config.jnp_dtype)
        bias = None
        if self.lm_head is not None and self.lm_head.bias is not None:
            bias = jnp.take(self.lm_head.bias[...], tokens, axis=0)
        return rows, bias

    def value(self, hidden: jax.Array) -> jax.Array:
        """Value head: hidden [B, S, H] -> [B, S] float32 (on stop_gradient(hidden) with
        config.value_detached: the decoder gets no gradient from the value loss)."""
        if self.config.value_detached:
            hidden = jax.lax.stop_gradient(hidden)
        return self.value_head(hidden.astype(jnp.float32))[..., 0]

    def forward(self, input_ids, attention_mask=None, positions=None, cache=None):
        """-> (logits [B, S, V] float32, hidden [B, S, H], new_cache or None)."""
        hidden, new_cache = self.hidden_states(input_ids, attention_mask, positions, cache)
        return self.logits(hidden), hidden, new_cache

    def __call__(self, input_ids, attention_mask=None, positions=None, cache=None) -> jax.Array:
        """-> logits [B, S, V] float32."""
        return self.forward(input_ids, attention_mask, positions, cache)[0]
