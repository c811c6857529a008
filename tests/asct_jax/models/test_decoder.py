"""Decoder: presets, parity with transformers' PyTorch models, padding, KV cache, value head."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from flax import nnx

from asct_jax import models
from tests.helpers import models as testing
from tests.helpers.tiers import examples

KINDS = ("qwen2", "llama")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """kind -> (our Decoder, torch model), from a tiny random checkpoint saved with safetensors."""
    out = {}
    for kind in KINDS:
        path = tmp_path_factory.mktemp(kind)
        torch_model = testing.tiny_hf_checkpoint(str(path), kind)
        model, tokenizer = models.load_pretrained(str(path))
        assert tokenizer is None  # no tokenizer files were saved
        out[kind] = (model, torch_model, str(path))
    return out


def _ids(seed, b, s, vocab=160):
    return np.random.default_rng(seed).integers(0, vocab, (b, s)).astype(np.int32)


def test_get_preset_and_overrides():
    cfg = models.get_preset("smollm2-135m", dtype="bfloat16")
    assert (cfg.num_layers, cfg.num_kv_heads, cfg.dtype) == (30, 3, "bfloat16")
    assert models.get_preset("qwen2.5-7b").qkv_bias and not models.get_preset("qwen2.5-7b").tie_embeddings
    with pytest.raises(ValueError, match="allowed: tiny, smollm2-135m, qwen2.5-0.5b"):
        models.get_preset("gpt5")
    with pytest.raises(ValueError, match="num_kv_heads"):
        models.get_preset("tiny", num_kv_heads=3)


def test_config_read_from_hf(tiny):
    q, l = tiny["qwen2"][0].config, tiny["llama"][0].config
    assert (q.qkv_bias, q.tie_embeddings, q.rope_theta, q.head_dim) == (True, False, 12_345.0, 16)
    assert (l.qkv_bias, l.tie_embeddings, l.rope_theta, l.head_dim, l.num_kv_heads) == (False, True, 5e5, 32, 1)


@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_pytorch(tiny, kind):
    model, torch_model, _ = tiny[kind]
    ids = _ids(0, 2, 12)
    ours = np.asarray(testing.jit_call(model, "__call__", jnp.asarray(ids)))
    with torch.no_grad():
        ref = torch_model(torch.as_tensor(ids, dtype=torch.long)).logits.numpy()
    assert ours.shape == (2, 12, 160) and ours.dtype == np.float32
    err = np.abs(ours - ref).max()
    print(f"{kind}: max |logit diff| = {err:.2e} (max |logit| {np.abs(ref).max():.1f})")
    assert err < 1e-4


def test_padding_left_and_right_match_unpadded(tiny):
    model = tiny["qwen2"][0]
    ids = _ids(1, 1, 7)
    ref = np.asarray(testing.jit_call(model, "__call__", jnp.asarray(ids)))[0]
    pad = np.zeros((1, 3), np.int32) + 5
    left = np.concatenate([pad, ids], 1)
    right = np.concatenate([ids, pad], 1)
    batch = np.concatenate([left, right])
    mask = np.concatenate([np.r_[[False] * 3, [True] * 7][None], np.r_[[True] * 7, [False] * 3][None]])
    out = np.asarray(testing.jit_call(model, "__call__", jnp.asarray(batch), jnp.asarray(mask)))
    np.testing.assert_allclose(out[0, 3:], ref, atol=1e-5)
    np.testing.assert_allclose(out[1, :7], ref, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_kv_cache_decoding_matches_full_forward(tiny, kind):
    """Prefill a left-padded prompt, then decode token by token: same logits as one full pass."""
    model = tiny[kind][0]
    b, p, n = 2, 6, 4
    ids = _ids(2, b, p + n)
    mask = np.ones((b, p + n), bool)
    mask[1, :2] = False  # row 1 is left-padded
    full = np.asarray(testing.jit_call(model, "__call__", jnp.asarray(ids), jnp.asarray(mask)))

    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, cache, tok, tok_mask):
        logits, _, cache = nnx.merge(graphdef, state).forward(tok, tok_mask, cache=cache)
        return logits, cache

    cache = models.init_cache(model.config, b, p + n)
    logits, cache = step(state, cache, jnp.asarray(ids[:, :p]), jnp.asarray(mask[:, :p]))
    got = [np.asarray(logits)]
    for t in range(p, p + n):
        logits, cache = step(state, cache, jnp.asarray(ids[:, t:t + 1]), jnp.asarray(mask[:, t:t + 1]))
        got.append(np.asarray(logits))
    got = np.concatenate(got, axis=1)
    assert step._cache_size() == 2  # prefill shape + decode shape
    np.testing.assert_allclose(got[mask], full[mask], atol=1e-4)
    np.testing.assert_array_equal(np.asarray(cache.lengths), mask.sum(1))


def test_value_head_is_a_parameter_and_trains(tiny):
    model = tiny["llama"][0]
    graphdef, state = nnx.split(model)
    params = nnx.state(model, nnx.Param)
    assert params["value_head"]["kernel"].shape == (64, 1)
    ids = jnp.asarray(_ids(3, 2, 5))

    @jax.jit
    def loss(state):
        m = nnx.merge(graphdef, state)
        _, hidden, _ = m.forward(ids)
        v = m.value(hidden)
        assert v.shape == (2, 5)
        return jnp.sum((v - 1.0) ** 2)

    grads = jax.grad(loss)(state)
    assert float(jnp.abs(grads["value_head"]["kernel"][...]).sum()) > 0
    assert float(loss(state)) == pytest.approx(10.0)  # zero-initialised head: v = 0


@pytest.mark.slow
def test_a_detached_value_head_trains_alone(tiny):
    """model.value_detached: the same values, the same value-head gradient, and no
    gradient of the value loss into the decoder (or its LoRA adapters); without it the
    value loss reaches every layer (the shared-trunk critic)."""
    path = tiny["qwen2"][2]
    ids = jnp.asarray(_ids(6, 2, 5))

    def value_loss_grads(model):
        # a head that is not zero (a zero head passes no gradient back to the trunk)
        model.value_head.kernel[...] = jnp.ones_like(model.value_head.kernel[...]) * 0.1
        graphdef, state = nnx.split(model)

        def loss(state):
            m = nnx.merge(graphdef, state)
            return jnp.sum((m.value(m.hidden_states(ids)[0]) - 1.0) ** 2)
        return jax.jit(jax.value_and_grad(loss))(state)

    for lora in (0, 2):
        shared, g_shared = value_loss_grads(models.load_pretrained(path, lora_rank=lora)[0])
        detached, g_det = value_loss_grads(
            models.load_pretrained(path, lora_rank=lora, value_detached=True)[0])
        assert float(detached) == pytest.approx(float(shared), rel=1e-6)
        np.testing.assert_allclose(g_det["value_head"]["kernel"][...],
                                   g_shared["value_head"]["kernel"][...], rtol=1e-5, atol=1e-5)
        trunk = lambda g: [x for p, x in jax.tree_util.tree_leaves_with_path(g)  # noqa: E731
                           if "value_head" not in jax.tree_util.keystr(p)]
        assert all(float(jnp.abs(x).max()) == 0.0 for x in trunk(g_det))
        assert max(float(jnp.abs(x).max()) for x in trunk(g_shared)) > 0


def test_bfloat16(tiny):
    model32 = tiny["qwen2"][0]
    model16, _ = models.load_pretrained(tiny["qwen2"][2], dtype="bfloat16")
    assert model16.layers.self_attn.q_proj.kernel.dtype == jnp.bfloat16
    ids = jnp.asarray(_ids(4, 2, 8))
    l16 = np.asarray(testing.jit_call(model16, "__call__", ids))
    l32 = np.asarray(testing.jit_call(model32, "__call__", ids))
    assert l16.dtype == np.float32 and np.isfinite(l16).all()
    assert np.abs(l16 - l32).max() < 0.05 * np.abs(l32).max()


def test_remat_and_lora_keep_the_loss_and_gradients(tiny):
    """model.remat recomputes activations without changing the loss or any gradient;
    LoRA (B = 0 at init) starts at the base model's loss, and its adapters get gradients."""
    path = tiny["qwen2"][2]
    ids = jnp.asarray(_ids(5, 2, 8))

    def loss_and_grads(model):
        graphdef, state = nnx.split(model)

        @jax.jit
        def loss(state):
            logits = nnx.merge(graphdef, state)(ids)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 0])
        return jax.value_and_grad(loss)(state)

    base, g_base = loss_and_grads(models.load_pretrained(path)[0])
    remat, g_remat = loss_and_grads(models.load_pretrained(path, remat=True)[0])
    np.testing.assert_allclose(remat, base, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g_remat), jax.tree.leaves(g_base)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    lora, g_lora = loss_and_grads(models.load_pretrained(path, lora_rank=2, remat=True)[0])
    np.testing.assert_allclose(lora, base, rtol=1e-6)
    b_grad = g_lora["layers"]["mlp"]["down_proj"]["lora_b"][...][0]   # layer 0 of [L, r, H]
    assert float(jnp.abs(b_grad).sum()) > 0


@settings(max_examples=examples(12), deadline=None)
@given(s=st.integers(1, 40), block=st.integers(1, 16), seed=st.integers(0, 2 ** 16))
def test_blocked_attention_equals_all_queries_at_once(s, block, seed):
    """layers.blocked_attention (queries in blocks, padded rows dropped) gives the values
    and gradients of dot_product_attention over all rows, under a causal + padding mask."""
    from asct_jax.models.layers import blocked_attention
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(2, s, 4, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(2, s, 2, 8)), jnp.float32) for _ in range(2))
    keep = jnp.asarray(rng.random((2, s)) > 0.25).at[:, 0].set(True)
    mask = (jnp.arange(s)[None, :] <= jnp.arange(s)[:, None])[None] & keep[:, None, :]

    def f(b):
        return jax.jit(jax.value_and_grad(
            lambda q, k, v: jnp.sum(jnp.sin(blocked_attention(q, k, v, mask, b))),
            argnums=(0, 1, 2)))(q, k, v)
    (want, g_want), (got, g_got) = f(0), f(block)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_got, g_want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_decoder_with_blocked_attention_keeps_its_loss_and_gradients(tiny):
    """model.attention_block changes what is alive at once, not the loss or a gradient."""
    path = tiny["qwen2"][2]
    ids = jnp.asarray(_ids(5, 2, 21))

    def loss_and_grads(model):
        graphdef, state = nnx.split(model)
        return jax.jit(jax.value_and_grad(lambda st: jnp.mean(jax.nn.log_softmax(
            nnx.merge(graphdef, st)(ids))[..., 0])))(state)

    base, g_base = loss_and_grads(models.load_pretrained(path, remat=True)[0])
    blocked, g_blocked = loss_and_grads(
        models.load_pretrained(path, remat=True, attention_block=8)[0])
    np.testing.assert_allclose(blocked, base, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g_blocked), jax.tree.leaves(g_base)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6)


def test_tiny_preset_random_init():
    cfg = models.get_preset("tiny", vocab_size=64)
    model = models.Decoder(cfg, rngs=nnx.Rngs(0))
    logits = testing.jit_call(model, "__call__", jnp.zeros((2, 3), jnp.int32))
    assert logits.shape == (2, 3, 64)


@pytest.mark.slow
def test_remat_keeps_the_backward_peak_flat_in_the_layers():
    """With model.remat the gradient's peak (XLA's compiled temp bytes, no timing) keeps
    one block's activations at a time: it grows with the layers far less than without
    remat, where every block's attention and MLP activations are saved."""
    from asct_jax.models.config import get_preset
    from asct_jax.models.decoder import Decoder

    def temp_bytes(remat, layers):
        cfg = get_preset("tiny", remat=remat, num_layers=layers, vocab_size=64,
                         max_seq_len=512)
        graphdef, state = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
        ids = jnp.ones((4, 384), jnp.int32)

        def loss(state):
            hidden, _ = nnx.merge(graphdef, state).hidden_states(ids)
            return jnp.mean(hidden.astype(jnp.float32) ** 2)
        return jax.jit(jax.grad(loss)).lower(state).compile().memory_analysis().temp_size_in_bytes

    grow_plain = temp_bytes(False, 8) - temp_bytes(False, 2)
    grow_remat = temp_bytes(True, 8) - temp_bytes(True, 2)
    assert grow_remat < 0.25 * grow_plain, (grow_remat, grow_plain)
