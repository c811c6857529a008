"""The decoder's layers stored stacked [L, ...] and run as one scanned block in every pass
but a decoding step: the initial weights of L blocks drawn one after another, the numbers of
the unrolled Python loop (`decoder.SCAN_LAYERS = False`), and one block's program whatever
the depth."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from asct_jax import models
from asct_jax.models import cache as cache_lib
from asct_jax.models import decoder as decoder_lib
from asct_jax.models.generate import _score, generate, score

B, P, N = 2, 7, 5


def _model(layers=3, **over):
    """A narrow random Qwen2-like decoder (QKV bias, untied head), non-zero value head."""
    cfg = models.get_preset("tiny", vocab_size=96, hidden_size=32, num_heads=4, num_kv_heads=2,
                            head_dim=8, intermediate_size=48, num_layers=layers, qkv_bias=True,
                            tie_embeddings=False, **over)
    model = models.Decoder(cfg, rngs=nnx.Rngs(3))
    model.value_head.kernel[...] = jnp.full_like(model.value_head.kernel[...], 0.1)
    return model


def _inputs():
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(1, 96, (B, P + N)), jnp.int32)
    mask = jnp.ones((B, P + N), bool).at[1, :2].set(False)     # row 1 left-padded
    return ids, mask


def _both(fn, monkeypatch):
    """fn() traced with the scanned layers, then with the unrolled loop (jit's caches
    cleared before each: a cached trace would not see the switch)."""
    jax.clear_caches()
    scanned = fn()
    monkeypatch.setattr(decoder_lib, "SCAN_LAYERS", False)
    jax.clear_caches()
    unrolled = fn()
    monkeypatch.setattr(decoder_lib, "SCAN_LAYERS", True)
    jax.clear_caches()
    return scanned, unrolled


def test_layers_are_stacked_blocks_drawn_in_sequence():
    """Every weight of `layers` is [L, ...]; slice i is the i-th of L blocks drawn from the
    same Rngs right after the embedding (the per-layer module list's draws)."""
    cfg = _model(3).config
    model = models.Decoder(cfg, rngs=nnx.Rngs(3))
    rngs = nnx.Rngs(3)
    nnx.Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs)   # the embedding's draw comes first
    blocks = [nnx.state(decoder_lib.layers.Block(cfg, rngs=rngs)) for _ in range(3)]
    stacked = nnx.state(model.layers)
    for i, block in enumerate(blocks):
        for w, b in zip(jax.tree.leaves(stacked), jax.tree.leaves(block)):
            assert w.shape == (3,) + b.shape
            np.testing.assert_array_equal(w[i], b)


def test_the_switch_reaches_the_trace(monkeypatch):
    """The unrolled loop's program has one block per layer, the scan's one block."""
    model = _model(4)
    ids, mask = _inputs()
    dots = lambda: jax.jit(lambda i: model(i, mask)).lower(ids).as_text().count("dot_general")
    scanned, unrolled = _both(dots, monkeypatch)
    assert unrolled > 3 * scanned


def _close(a, b, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32),
                                   rtol=1e-5, atol=atol)


@pytest.mark.parametrize("over", [{}, {"remat": True}, {"lora_rank": 2}],
                         ids=["plain", "remat", "lora"])
def test_training_pass_equals_the_unrolled_loop(monkeypatch, over):
    """Loss (log-likelihood + value) and every gradient, plain, under remat, with LoRA."""
    model = _model(**over)
    graphdef, state = nnx.split(model)
    ids, mask = _inputs()

    def loss(st):
        m = nnx.merge(graphdef, st)
        logits, hidden, _ = m.forward(ids, mask)
        return jnp.mean(jax.nn.log_softmax(logits)[..., 1]) + jnp.mean(m.value(hidden) ** 2)
    scanned, unrolled = _both(lambda: jax.jit(jax.value_and_grad(loss))(state), monkeypatch)
    _close(scanned, unrolled)


def test_cached_prefill_and_decode_equal_the_unrolled_loop(monkeypatch):
    """The prompt through the cache, then one token at a time: logits and the cache."""
    model = _model()
    graphdef, state = nnx.split(model)
    ids, mask = _inputs()

    @jax.jit
    def run(st):
        m = nnx.merge(graphdef, st)
        logits, _, cache = m.forward(ids[:, :P], mask[:, :P], cache=models.init_cache(
            m.config, B, P + N))
        out = [logits]
        for t in range(P, P + N):
            logits, _, cache = m.forward(ids[:, t:t + 1], mask[:, t:t + 1], cache=cache)
            out.append(logits)
        return jnp.concatenate(out, axis=1), cache
    (scanned, cache), (unrolled, cache_u) = _both(lambda: run(state), monkeypatch)
    assert len(cache.k) == 3 and cache.k[0].shape == (B, 2, P + N, 8)
    _close((scanned, cache), (unrolled, cache_u))
    full = jax.jit(lambda st: nnx.merge(graphdef, st)(ids, mask))(state)
    np.testing.assert_allclose(scanned[mask], full[mask], atol=1e-4)


@pytest.mark.slow
def test_generate_and_score_equal_the_unrolled_loop(monkeypatch):
    """Greedy tokens and log-probs of `models.generate`, and `models.score`."""
    model = _model()
    ids, mask = _inputs()
    (g, s), (g_u, s_u) = _both(lambda: (
        generate(model, ids[:, :P], mask[:, :P], jax.random.PRNGKey(0), max_new_tokens=N,
                     greedy=True),
        score(model, ids[:, :P], mask[:, :P], ids[:, P:], mask[:, P:])), monkeypatch)
    np.testing.assert_array_equal(g.tokens, g_u.tokens)
    _close((g.logp, s), (g_u.logp, s_u))


def test_repeat_and_grow():
    """cache.repeat: each sequence k times in a row; grow: empty slots at the end."""
    model = _model()
    ids, mask = _inputs()
    _, _, cache = model.forward(ids[:, :P], mask[:, :P], cache=models.init_cache(
        model.config, B, P))
    rep = cache_lib.grow(cache_lib.repeat(cache, 3), 2, model.config.max_seq_len)
    assert len(rep.k) == 3 and rep.k[0].shape == (3 * B, 2, P + 2, 8)
    assert rep.mask.shape == (3 * B, P + 2)
    np.testing.assert_array_equal(rep.k[2][3, :, :P], cache.k[2][1])
    np.testing.assert_array_equal(rep.lengths, np.repeat(cache.lengths, 3))
    assert not rep.mask[:, P:].any() and not rep.v[1][:, :, P:].any()


def _dots(lowered) -> int:
    return lowered.as_text().count("dot_general")


def test_every_pass_but_decoding_holds_one_block_whatever_the_depth():
    """The lowered programs of the training pass, the cached prefill and the scoring pass
    have as many matmuls at 6 layers as at 2 (the unrolled loop had one block per layer);
    one decoding step keeps its loop (one block per layer: its cache written in place)."""
    ids, mask = _inputs()

    def counts(layers):
        graphdef, state = nnx.split(_model(layers))
        cache = jax.eval_shape(lambda: models.init_cache(nnx.merge(graphdef, state).config,
                                                         B, P + N))

        def train(st):
            return jnp.mean(nnx.merge(graphdef, st)(ids, mask))

        def cached(st, cache, s):
            return nnx.merge(graphdef, st).forward(ids[:, :s], mask[:, :s], cache=cache)[0]
        return (_dots(jax.jit(jax.grad(train)).lower(state)),
                _dots(jax.jit(cached, static_argnums=2).lower(state, cache, P)),
                _dots(_score.lower(graphdef, state, ids[:, :P], mask[:, :P], ids[:, P:],
                                       mask[:, P:])),
                _dots(jax.jit(cached, static_argnums=2).lower(state, cache, 1)))
    two, six = counts(2), counts(6)
    assert two[:3] == six[:3]
    assert six[3] - 1 == 3 * (two[3] - 1)          # the LM head once
