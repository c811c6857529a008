"""asct_jax.models.layers against plain NumPy (float64) on tiny shapes: `rope_tables` /
`apply_rope` (Llama's half-split rotary embeddings: norms kept, q . k a function of the
position difference only), `blocked_attention` (any block size) and `cached_attention`
(both its one-token and its many-token arrangement) as grouped-query softmax attention,
`Attention` (projections, QKV bias, rotary, attention, output projection; its KV-cache
branch writes the buffers in place and equals the uncached pass), the SwiGLU `MLP`, the
RMSNorm of the config's epsilon, the pre-norm `Block` and its causality (a later token
never changes an earlier position), and `LoRALinear` (y = x W + b + alpha / r (x A) B,
the base at init; `dense` makes one for the configured targets only)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, strategies as st

from asct_jax.models import layers
from asct_jax.models.config import ModelConfig

CFG = ModelConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=4, num_kv_heads=2,
                  head_dim=8, intermediate_size=24, rope_theta=50.0, rms_norm_eps=0.1,
                  qkv_bias=True, max_seq_len=64)
B, S = 2, 6


# -- NumPy references ---------------------------------------------------------------------

def np_rope(pos, d, theta):
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos.astype(np.float64)[..., None] * inv
    ang = np.concatenate([ang, ang], -1)
    return np.cos(ang), np.sin(ang)


def np_apply_rope(x, cos, sin):
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos[:, :, None] + rot * sin[:, :, None]


def np_attention(q, k, v, mask):
    """q [B, S, N, D], k / v [B, T, K, D] (query head n reads KV head n // (N / K)),
    mask [B, S, T] -> [B, S, N, D]."""
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    logits = np.einsum("bsnd,btnd->bnst", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask[:, None], logits, -np.inf)
    logits[~np.isfinite(logits).any(-1)] = 0.0    # a row without keys (padding): not compared
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bnst,btnd->bsnd", p, v)


def np_rms(x, scale, eps):
    return x / np.sqrt(np.mean(x ** 2, -1, keepdims=True) + eps) * scale


def lin(m, x):
    y = x @ np.asarray(m.kernel[...], np.float64)
    return y if m.bias is None else y + np.asarray(m.bias[...], np.float64)


def np_attention_module(m, x, cos, sin, mask):
    b, s, _ = x.shape
    q = lin(m.q_proj, x).reshape(b, s, m.num_heads, m.head_dim)
    k = lin(m.k_proj, x).reshape(b, s, m.num_kv_heads, m.head_dim)
    v = lin(m.v_proj, x).reshape(b, s, m.num_kv_heads, m.head_dim)
    q, k = np_apply_rope(q, cos, sin), np_apply_rope(k, cos, sin)
    return lin(m.o_proj, np_attention(q, k, v, mask).reshape(b, s, -1)), k, v


def np_mlp(m, x):
    g = lin(m.gate_proj, x)
    return lin(m.down_proj, g / (1 + np.exp(-g)) * lin(m.up_proj, x))


# -- fixtures -----------------------------------------------------------------------------

def randomized(module, seed):
    """`module` with every parameter drawn anew (0.3 N(0, 1)): a wrong use of any of them
    (a zero bias, a unit norm scale, a zero LoRA B) shows in the outputs."""
    rng = np.random.default_rng(seed)
    state = nnx.state(module, nnx.Param)
    nnx.update(module, jax.tree.map(
        lambda w: jnp.asarray(0.3 * rng.normal(size=w.shape), w.dtype), state))
    return module


def causal_mask(keep):
    s = keep.shape[1]
    return (np.arange(s)[None, :] <= np.arange(s)[:, None])[None] & keep[:, None, :]


@pytest.fixture(scope="module")
def block():
    return randomized(layers.Block(CFG, rngs=nnx.Rngs(0)), 1)


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(B, S, CFG.hidden_size)).astype(np.float32)
    pos = np.stack([np.arange(S), np.r_[0, 0, np.arange(S - 2)]]) + np.array([[3], [0]])
    keep = np.ones((B, S), bool)
    keep[1, :2] = False                     # row 1 left-padded
    cos, sin = (np.asarray(t) for t in layers.rope_tables(jnp.asarray(pos), CFG.head_dim,
                                                          CFG.rope_theta))
    return x, pos, causal_mask(keep), cos, sin


# -- rotary embeddings --------------------------------------------------------------------

def test_rope_tables_follow_the_half_split_formula():
    pos = np.array([[0, 1, 2, 7], [5, 100, 999, 3]])
    cos, sin = layers.rope_tables(jnp.asarray(pos), 8, 500.0)
    assert cos.shape == sin.shape == (2, 4, 8) and cos.dtype == jnp.float32
    want_cos, want_sin = np_rope(pos, 8, 500.0)
    np.testing.assert_allclose(cos, want_cos, atol=2e-4)
    np.testing.assert_allclose(sin, want_sin, atol=2e-4)
    np.testing.assert_array_equal(np.asarray(cos)[0, 0], 1.0)
    np.testing.assert_array_equal(np.asarray(sin)[0, 0], 0.0)
    with pytest.raises(AssertionError, match="rank"):      # positions without a batch axis
        layers.rope_tables(jnp.arange(4), 8, 500.0)


@given(m=st.integers(0, 200), n=st.integers(0, 200), shift=st.integers(0, 50),
       seed=st.integers(0, 2 ** 16))
def test_rotary_keeps_norms_and_makes_q_dot_k_a_function_of_the_offset(m, n, shift, seed):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(1, 1, 1, 8)).astype(np.float32) for _ in range(2))

    def rot(x, p):
        cos, sin = layers.rope_tables(jnp.array([[p]]), 8, 100.0)
        out = np.asarray(layers.apply_rope(jnp.asarray(x), cos, sin), np.float64)
        np.testing.assert_allclose(out, np_apply_rope(x.astype(np.float64), *np_rope(
            np.array([[p]]), 8, 100.0)), atol=1e-4)
        return out[0, 0, 0]
    rq = rot(q, m)
    pair_norm = lambda x: x[:4] ** 2 + x[4:] ** 2   # noqa: E731  (i, i + D/2) rotate together
    np.testing.assert_allclose(pair_norm(rq), pair_norm(q[0, 0, 0].astype(np.float64)),
                               rtol=1e-4, atol=1e-6)
    assert rq @ rot(k, n) == pytest.approx(rot(q, m + shift) @ rot(k, n + shift), rel=1e-3,
                                           abs=1e-3)


# -- attention ----------------------------------------------------------------------------

def _qkv(seed, s, t=None, n=4, kh=2, d=8):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, s, n, d)).astype(np.float32)
    k, v = (rng.normal(size=(B, t or s, kh, d)).astype(np.float32) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("block_size", [0, 3, 7, 10])
def test_blocked_attention_is_grouped_query_softmax_attention(block_size):
    """S = 7 in blocks of 3 (two padded rows), 7, 10 or none: the same values."""
    q, k, v = _qkv(3, 7)
    keep = np.ones((B, 7), bool)
    keep[0, :3] = False
    keep[1, 4] = False
    mask = causal_mask(keep)
    mask[0, :3, 0] = True     # no row without a key (the reference's softmax needs one)
    got = layers.blocked_attention(*map(jnp.asarray, (q, k, v, mask)), block_size)
    assert got.shape == q.shape
    np.testing.assert_allclose(got, np_attention(q, k, v, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("s", [1, 3], ids=["decode-step", "many-tokens"])
def test_cached_attention_reads_the_cache_layout(s):
    """k / v in the cache's [B, K, T, D] layout, T = 9 slots, some empty (mask False)."""
    q, k, v = _qkv(4, s, t=9)
    rng = np.random.default_rng(5)
    mask = rng.random((B, s, 9)) > 0.4
    mask[:, :, 2] = True
    got = layers.cached_attention(jnp.asarray(q), jnp.asarray(k.swapaxes(1, 2)),
                                  jnp.asarray(v.swapaxes(1, 2)), jnp.asarray(mask))
    np.testing.assert_allclose(got, np_attention(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_attention_module_matches_numpy(block, inputs):
    """Compared at the real tokens' rows (a padding row attends to no key)."""
    x, _, mask, cos, sin = inputs
    attn, real = block.self_attn, mask.any(-1)
    assert attn.q_proj.bias is not None and attn.o_proj.bias is None
    out, (k, v) = attn(*map(jnp.asarray, (x, cos, sin, mask)))
    want, want_k, want_v = np_attention_module(attn, x.astype(np.float64), cos, sin, mask)
    np.testing.assert_allclose(np.asarray(out)[real], want[real], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(k, want_k, rtol=1e-4, atol=1e-4)      # rotated keys
    np.testing.assert_allclose(v, want_v, rtol=1e-4, atol=1e-4)


def test_attention_refuses_a_mask_of_another_shape(block, inputs):
    x, _, mask, cos, sin = inputs
    with pytest.raises(AssertionError, match="shape"):
        block.self_attn(*map(jnp.asarray, (x, cos, sin, mask[:, :, :-1])))


def test_cached_attention_writes_the_buffers_and_equals_the_uncached_pass(block, inputs):
    """A 4-token prefill into zero buffers of T = 9 slots, then 2 one-token steps: each
    real position's output is the uncached pass's; slots [0, 6) hold its keys, the rest 0."""
    x, _, mask, cos, sin = inputs
    attn, t = block.self_attn, 9
    full, (k_full, v_full) = attn(*map(jnp.asarray, (x, cos, sin, mask)))
    kv = (jnp.zeros((B, 2, t, 8)), jnp.zeros((B, 2, t, 8)))
    wide = np.zeros((B, S, t), bool)
    wide[:, :, :S] = mask
    outs = []
    for lo, hi in ((0, 4), (4, 5), (5, 6)):
        out, kv = attn(jnp.asarray(x[:, lo:hi]), jnp.asarray(cos[:, lo:hi]),
                       jnp.asarray(sin[:, lo:hi]), jnp.asarray(wide[:, lo:hi]), kv,
                       jnp.asarray(lo, jnp.int32))
        outs.append(np.asarray(out))
    real = mask.any(-1)
    np.testing.assert_allclose(np.concatenate(outs, 1)[real], np.asarray(full)[real],
                               rtol=1e-5, atol=1e-5)
    for buf, ref in zip(kv, (k_full, v_full)):
        assert buf.shape == (B, 2, t, 8)
        np.testing.assert_allclose(buf[:, :, :S], np.asarray(ref).swapaxes(1, 2), atol=1e-6)
        assert not np.asarray(buf[:, :, S:]).any()


# -- MLP, norm, block ---------------------------------------------------------------------

def test_mlp_is_swiglu(block, inputs):
    x = inputs[0]
    np.testing.assert_allclose(block.mlp(jnp.asarray(x)), np_mlp(block.mlp, x.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)


def test_rms_norm_uses_the_configs_epsilon(block, inputs):
    x = 0.3 * inputs[0]     # small: eps = 0.1 matters
    norm = block.input_layernorm
    want = np_rms(x.astype(np.float64), np.asarray(norm.scale[...], np.float64), CFG.rms_norm_eps)
    np.testing.assert_allclose(norm(jnp.asarray(x)), want, rtol=1e-5, atol=1e-5)


def test_block_is_pre_norm_with_residuals(block, inputs):
    x, _, mask, cos, sin = inputs
    real = mask.any(-1)
    out, _ = block(*map(jnp.asarray, (x, cos, sin, mask)))
    x64 = x.astype(np.float64)
    scale = lambda n: np.asarray(n.scale[...], np.float64)   # noqa: E731
    h = x64 + np_attention_module(block.self_attn, np_rms(x64, scale(block.input_layernorm),
                                                          0.1), cos, sin, mask)[0]
    want = h + np_mlp(block.mlp, np_rms(h, scale(block.post_attention_layernorm), 0.1))
    np.testing.assert_allclose(np.asarray(out)[real], want[real], rtol=1e-4, atol=1e-4)


@given(j=st.integers(0, S - 1), seed=st.integers(0, 2 ** 16))
def test_a_later_token_never_changes_an_earlier_position(block, inputs, j, seed):
    """Without padding (a padding row, attending to no key, averages all of them)."""
    x, _, _, cos, sin = inputs
    mask = causal_mask(np.ones((B, S), bool))
    y = x.copy()
    y[:, j] += np.random.default_rng(seed).normal(size=(B, CFG.hidden_size)).astype(np.float32)
    before, after = (np.asarray(block(*map(jnp.asarray, (z, cos, sin, mask)))[0])
                     for z in (x, y))
    np.testing.assert_array_equal(after[:, :j], before[:, :j])
    assert np.abs(after[:, j] - before[:, j]).min() > 0


# -- LoRA ---------------------------------------------------------------------------------

def test_lora_linear_adds_the_scaled_low_rank_product():
    m = layers.LoRALinear(6, 5, rank=2, alpha=3.0, use_bias=True, rngs=nnx.Rngs(0))
    assert m.lora_scale == 1.5
    randomized(m, 7)
    x = np.random.default_rng(8).normal(size=(3, 6))
    a, b_ = (np.asarray(p[...], np.float64) for p in (m.lora_a, m.lora_b))
    want = lin(m, x) + 1.5 * (x @ a) @ b_
    np.testing.assert_allclose(m(jnp.asarray(x, jnp.float32)), want, rtol=1e-5, atol=1e-5)


def test_lora_starts_at_the_base_layer():
    cfg = CFG.replace(lora_rank=3, lora_alpha=6.0, lora_targets=("q_proj", "down_proj"))
    attn, mlp = layers.Attention(cfg, rngs=nnx.Rngs(0)), layers.MLP(cfg, rngs=nnx.Rngs(0))
    lora = {n: type(p) is layers.LoRALinear for n, p in
            [("q", attn.q_proj), ("k", attn.k_proj), ("v", attn.v_proj), ("o", attn.o_proj),
             ("gate", mlp.gate_proj), ("up", mlp.up_proj), ("down", mlp.down_proj)]}
    assert lora == dict(q=True, k=False, v=False, o=False, gate=False, up=False, down=True)
    q = attn.q_proj
    assert isinstance(q.lora_a, nnx.LoRAParam) and isinstance(q.lora_b, nnx.LoRAParam)
    a, b_ = np.asarray(q.lora_a[...]), np.asarray(q.lora_b[...])
    assert a.shape == (16, 3) and b_.shape == (3, 32) and not b_.any()
    assert 0 < np.abs(a).max() <= 16 ** -0.5 and q.lora_scale == 2.0
    x = jnp.asarray(np.random.default_rng(9).normal(size=(4, 16)), jnp.float32)
    base = x @ q.kernel[...] + q.bias[...]
    np.testing.assert_allclose(q(x), base, rtol=1e-6, atol=1e-6)
    assert not any(type(p) is layers.LoRALinear for p in (
        layers.Attention(CFG, rngs=nnx.Rngs(0)).q_proj, layers.MLP(CFG, rngs=nnx.Rngs(0)).down_proj))


def test_rotary_and_lora_keep_the_compute_dtype():
    cos, sin = layers.rope_tables(jnp.array([[1, 2]]), 8, 100.0)
    assert layers.apply_rope(jnp.ones((1, 2, 3, 8), jnp.bfloat16), cos, sin).dtype == jnp.bfloat16
    m = randomized(layers.MLP(CFG.replace(lora_rank=2, dtype="bfloat16"), rngs=nnx.Rngs(0)), 3)
    out = m(jnp.ones((2, 3, 16), jnp.bfloat16))
    assert out.dtype == jnp.bfloat16 and out.shape == (2, 3, 16)
