"""Next-token sampling: temperature, nucleus (top-p) truncation, greedy."""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def top_p_filter(logits: jax.Array, top_p: jax.Array) -> jax.Array:
    """Keeps the smallest set of tokens whose probability mass reaches top_p; others -> -inf.

    logits [B, V] float32; top_p [] float in (0, 1]. The most likely token is always kept.
      keep_k = #{k : sum_{j < k} p_(j) < top_p}   (p sorted descending)
    """
    chex.assert_rank(logits, 2)
    sorted_logits = -jnp.sort(-logits, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    num_keep = jnp.maximum(jnp.sum(mass_before < top_p, axis=-1), 1)              # [B]
    threshold = jnp.take_along_axis(sorted_logits, num_keep[:, None] - 1, axis=-1)  # [B, 1]
    return jnp.where(logits >= threshold, logits, -jnp.inf)


def sample_tokens(key: jax.Array, logits: jax.Array, temperature: jax.Array, top_p: jax.Array,
                  greedy: bool) -> jax.Array:
    """Draws one token per row. logits [B, V] float32 -> tokens [B] int32.

    greedy (static): argmax. Otherwise softmax(logits / temperature), truncated to top_p.
    """
    chex.assert_rank(logits, 2)
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = logits / temperature
    scaled = jax.lax.cond(top_p < 1.0, top_p_filter, lambda x, _: x, scaled, top_p)
    return jax.random.categorical(key, scaled, axis=-1).astype(jnp.int32)
