"""Decoder building blocks: rotary embeddings, grouped-query attention, SwiGLU MLP, block."""
from __future__ import annotations

from typing import Optional, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from asct_jax.models import cache as cache_lib
from asct_jax.models.config import ModelConfig

INIT_STD = 0.02  # transformers' initializer_range default for Llama / Qwen2.


class LoRALinear(nnx.Linear):
    """y = x W (+ b) + (alpha / r) (x A) B  (LoRA, Hu et al. 2021).

    A [in, r] ~ U(-1/sqrt(in), 1/sqrt(in)), B [r, out] = 0 at init (so the model starts
    as the base); both are `nnx.LoRAParam` (float32), which is how training tells them
    from the frozen base weights. Loading a checkpoint fills `kernel` / `bias` only.
    """

    def __init__(self, d_in: int, d_out: int, *, rank: int, alpha: float, rngs: nnx.Rngs,
                 **kwargs):
        super().__init__(d_in, d_out, rngs=rngs, **kwargs)
        self.lora_a, self.lora_b = lora_init(rngs.params(), d_in, d_out, rank)
        self.lora_scale = alpha / rank

    def __call__(self, x: jax.Array) -> jax.Array:
        delta = (x.astype(jnp.float32) @ self.lora_a[...]) @ self.lora_b[...]
        return super().__call__(x) + (self.lora_scale * delta).astype(self.dtype or x.dtype)


def lora_init(key: jax.Array, d_in: int, d_out: int, rank: int):
    """(A, B) LoRAParams: A uniform in +-1/sqrt(d_in), B zeros."""
    bound = 1.0 / d_in ** 0.5
    a = jax.random.uniform(key, (d_in, rank), jnp.float32, -bound, bound)
    return nnx.LoRAParam(a), nnx.LoRAParam(jnp.zeros((rank, d_out), jnp.float32))


def dense(cfg: ModelConfig, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs,
          name: str = "") -> nnx.Linear:
    """A Linear layer; a `LoRALinear` when cfg.lora_rank > 0 and `name` is a LoRA target."""
    kwargs = dict(use_bias=bias, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
                  kernel_init=nnx.initializers.normal(INIT_STD), rngs=rngs)
    if cfg.lora_rank and name in cfg.lora_targets:
        return LoRALinear(d_in, d_out, rank=cfg.lora_rank, alpha=cfg.lora_alpha, **kwargs)
    return nnx.Linear(d_in, d_out, **kwargs)


def rope_tables(positions: jax.Array, head_dim: int, theta: float) -> Tuple[jax.Array, jax.Array]:
    """cos, sin [B, S, D] float32 for integer positions [B, S] (Llama's half-split layout).

      inv_freq_i = theta^(-2i / D),  angle = pos * inv_freq,  tables = [angle, angle]
    """
    chex.assert_rank(positions, 2)
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    angle = positions.astype(jnp.float32)[..., None] * inv_freq
    angle = jnp.concatenate([angle, angle], axis=-1)
    return jnp.cos(angle), jnp.sin(angle)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [B, S, N, D] rotated: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]."""
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    out = x.astype(jnp.float32) * cos[:, :, None] + rotated * sin[:, :, None]
    return out.astype(x.dtype)


class Attention(nnx.Module):
    """Grouped-query self-attention with optional QKV bias (Qwen2) and a KV cache."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.block = cfg.attention_block
        h, q_dim, kv_dim = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = dense(cfg, h, q_dim, bias=cfg.qkv_bias, rngs=rngs, name="q_proj")
        self.k_proj = dense(cfg, h, kv_dim, bias=cfg.qkv_bias, rngs=rngs, name="k_proj")
        self.v_proj = dense(cfg, h, kv_dim, bias=cfg.qkv_bias, rngs=rngs, name="v_proj")
        self.o_proj = dense(cfg, q_dim, h, bias=False, rngs=rngs, name="o_proj")

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 kv: Optional[Tuple[jax.Array, jax.Array]] = None, index: Optional[jax.Array] = None):
        """x [B, S, H]; cos, sin [B, S, D]; mask [B, S, T] bool (query s may attend key t).

        Without `kv` the keys are the S new tokens (T = S). With `kv` = (k, v) [B, K, T, D]
        (`cache.KVCache` layout) the new keys/values are written at slots [index, index + S)
        and all T slots are keys.
        Returns (out [B, S, H], (k, v)) where (k, v) are the updated buffers (or the new keys).
        """
        b, s, _ = x.shape
        x2 = x.reshape(b * s, -1)  # 2-D matmuls: see `MLP`
        q = self.q_proj(x2).reshape(b, s, self.num_heads, self.head_dim)
        k = self.k_proj(x2).reshape(b, s, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x2).reshape(b, s, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if kv is None:
            chex.assert_shape(mask, (b, s, s))
            out = blocked_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask, self.block)
        else:
            k = cache_lib.write_kv(kv[0], k, index)
            v = cache_lib.write_kv(kv[1], v, index)
            chex.assert_shape(mask, (b, s, k.shape[2]))
            out = cached_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask)
        out = self.o_proj(out.reshape(b * s, self.num_heads * self.head_dim))
        return out.reshape(b, s, -1), (k, v)


def blocked_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                      block: int) -> jax.Array:
    """Self-attention with the queries in blocks: q [B, S, N, D], k / v [B, S, K, D], mask
    [B, S, S] -> [B, S, N, D].

    out[:, s] = softmax_t(q_s . k_t / sqrt(D), masked)  v: each query row's softmax runs over
    all S keys, so blocking the rows changes no arithmetic, only what is alive at once. The
    blocks run as a lax.map, each under jax.checkpoint, so neither pass holds more than one
    block's [B, N, block, S] logits and probabilities (the backward recomputes them). S is
    padded to a multiple of `block` with fully masked rows, dropped at the end.
    block <= 0 or S <= block: `jax.nn.dot_product_attention` on all rows at once.
    """
    b, s, n, d = q.shape
    if block <= 0 or s <= block:
        return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None])
    nb = -(-s // block)
    pad = nb * block - s
    qb = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(b, nb, block, n, d)
    mb = jnp.pad(mask, ((0, 0), (0, pad), (0, 0))).reshape(b, nb, block, s)

    @jax.checkpoint
    def one_block(args):
        q_i, m_i = args                                           # [B, block, N, D], [B, block, S]
        return jax.nn.dot_product_attention(q_i, k, v, mask=m_i[:, None])

    out = jax.lax.map(one_block, (qb.swapaxes(0, 1), mb.swapaxes(0, 1)))  # [nb, B, block, N, D]
    return out.swapaxes(0, 1).reshape(b, nb * block, n, d)[:, :s]


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Grouped-query attention over a cache: q [B, S, N, D], k / v [B, K, T, D], mask [B, S, T]
    -> [B, S, N, D].

    The arithmetic of `jax.nn.dot_product_attention`'s XLA path (float32 logits scaled by
    D^-1/2, masked with -0.7 * float32 max, float32 softmax), arranged for XLA:CPU: the cache
    is read in its own [B, K, T, D] layout (no per-step copy of it), and both dots are batched
    over (B, K) with the G = N / K query heads of a group as rows: [G S, D] x [D, T] and
    [G S, T] x [T, D]. One decoding step (S = 1) takes its logits as [.., T, G] (half the time
    of [.., G, T] there); SmolLM2 at B 32, T 320, one layer: 4.4 ms -> 1.5 ms a decoding step
    (the [B, S, N, D] output of `dot_product_attention`'s einsum ran as a plain, unfused dot),
    217 -> 185 ms for a 256-token prompt.
    """
    b, s, n, d = q.shape
    kh = k.shape[1]
    g = n // kh
    scale, neg = jnp.float32(1.0 / np.sqrt(d)), jnp.float32(-0.7 * np.finfo(np.float32).max)
    if s == 1:
        logits = jnp.einsum("bskgd,bktd->bkgst", q.reshape(b, s, kh, g, d), k,
                            preferred_element_type=jnp.float32) * scale
        logits = jnp.where(mask[:, None, None], logits, neg)
        probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgst,bktd->bkgsd", probs, v)
    else:
        qg = q.reshape(b, s, kh, g, d).transpose(0, 2, 3, 1, 4).reshape(b, kh, g * s, d)
        logits = jnp.einsum("bkqd,bktd->bkqt", qg, k, preferred_element_type=jnp.float32) * scale
        logits = jnp.where(jnp.tile(mask, (1, g, 1))[:, None], logits, neg)   # rows (g, s)
        probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkqt,bktd->bkqd", probs, v)                      # [B, K, G S, D]
    return out.reshape(b, kh, g, s, d).transpose(0, 3, 1, 2, 4).reshape(b, s, n, d)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.gate_proj = dense(cfg, cfg.hidden_size, cfg.intermediate_size, bias=False, rngs=rngs,
                               name="gate_proj")
        self.up_proj = dense(cfg, cfg.hidden_size, cfg.intermediate_size, bias=False, rngs=rngs,
                             name="up_proj")
        self.down_proj = dense(cfg, cfg.intermediate_size, cfg.hidden_size, bias=False, rngs=rngs,
                               name="down_proj")

    def __call__(self, x: jax.Array) -> jax.Array:
        # On [B*S, H] rather than [B, S, H]: with 3-D activations XLA:CPU materialises the
        # weight gradient's transposed operand in a loop fusion with the SiLU backward,
        # strided writes that cost ~4x the whole 2-D MLP backward (same numbers).
        x2 = x.reshape(-1, x.shape[-1])
        out = self.down_proj(jax.nn.silu(self.gate_proj(x2)) * self.up_proj(x2))
        return out.reshape(x.shape[:-1] + (out.shape[-1],))


def rms_norm(cfg: ModelConfig, *, rngs: nnx.Rngs) -> nnx.RMSNorm:
    return nnx.RMSNorm(cfg.hidden_size, epsilon=cfg.rms_norm_eps, dtype=cfg.jnp_dtype,
                       param_dtype=cfg.jnp_param_dtype, rngs=rngs)


class Block(nnx.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.input_layernorm = rms_norm(cfg, rngs=rngs)
        self.self_attn = Attention(cfg, rngs=rngs)
        self.post_attention_layernorm = rms_norm(cfg, rngs=rngs)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(self, x, cos, sin, mask, kv=None, index=None):
        """x [B, S, H] -> ([B, S, H], (k, v)); see `Attention`."""
        attn, kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, kv, index)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), kv
