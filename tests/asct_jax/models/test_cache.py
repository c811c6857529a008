"""asct_jax.models.cache: `init_cache` (L empty [B, K, T, D] buffers, bounded by the
config's max_seq_len), `write` / `write_kv` (slots [index, index + S), the rest kept;
write_kv from [B, S, K, D] into the heads-first layout), `grow` / `pad_left` (empty
slots after / before, the bookkeeping kept / shifted) and `repeat` (each sequence k times
in a row) against NumPy; and their contract with the decoder on a tiny random model: a
prompt prefilled into the cache and decoded token by token gives the uncached pass's
logits at every real position, also through the `prompt_pass` arrangement (a prompt-wide
cache, padded on the left, grown) and after `repeat` (each copy decodes as its row)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, strategies as st

from asct_jax.models import cache as cache_lib
from asct_jax.models.config import ModelConfig
from asct_jax.models.decoder import Decoder

CFG = ModelConfig(vocab_size=32, hidden_size=16, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, intermediate_size=24, rope_theta=50.0, qkv_bias=True,
                  tie_embeddings=False, max_seq_len=12)
B, P, N = 2, 5, 3          # batch, prompt, decoded tokens
PAD = 2                    # pad_left's extra slots


def _filled(seed=0, b=B, t=6):
    """A cache of CFG with random buffers, mask, lengths and index 3."""
    rng = np.random.default_rng(seed)
    c = cache_lib.init_cache(CFG, b, t)
    buf = lambda: jnp.asarray(rng.normal(size=c.k[0].shape), jnp.float32)   # noqa: E731
    return c.replace(k=(buf(), buf()), v=(buf(), buf()), mask=jnp.asarray(rng.random((b, t)) > .5),
                     lengths=jnp.asarray(rng.integers(0, 4, b), jnp.int32),
                     index=jnp.asarray(3, jnp.int32))


# -- the structure ------------------------------------------------------------------------

def test_init_cache_is_empty_and_shaped_per_layer():
    c = cache_lib.init_cache(CFG.replace(dtype="bfloat16"), 3, 7)
    assert len(c.k) == len(c.v) == 2 and c.max_len == 7
    for buf in c.k + c.v:
        assert buf.shape == (3, 2, 7, 8) and buf.dtype == jnp.bfloat16 and not buf.any()
    assert c.mask.shape == (3, 7) and c.mask.dtype == jnp.bool_ and not c.mask.any()
    assert c.lengths.dtype == jnp.int32 and not c.lengths.any() and c.lengths.shape == (3,)
    assert c.index.shape == () and int(c.index) == 0
    assert cache_lib.init_cache(CFG, 1, 12).max_len == 12           # max_seq_len itself fits


@pytest.mark.parametrize("make", [lambda: cache_lib.init_cache(CFG, 1, 13),
                                  lambda: cache_lib.grow(_filled(t=6), 7, CFG.max_seq_len)],
                         ids=["init_cache", "grow"])
def test_a_cache_longer_than_max_seq_len_is_a_one_line_error(make):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value).endswith(": max_len=13 exceeds config.max_seq_len=12")
    assert "\n" not in str(e.value)


@given(s=st.integers(1, 4), index=st.integers(0, 6), seed=st.integers(0, 99))
def test_write_puts_new_rows_at_the_index_and_keeps_the_rest(s, index, seed):
    index = min(index, 6 - s)
    rng = np.random.default_rng(seed)
    buf, new = rng.normal(size=(2, 6, 3)), rng.normal(size=(2, s, 3))
    want = buf.copy()
    want[:, index:index + s] = new
    got = cache_lib.write(jnp.asarray(buf, jnp.float32), jnp.asarray(new), jnp.asarray(index))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    kv = rng.normal(size=(2, 3, 6, 4))                      # [B, K, T, D]
    new_kv = rng.normal(size=(2, s, 3, 4))                  # [B, S, K, D]
    want_kv = kv.copy()
    want_kv[:, :, index:index + s] = new_kv.transpose(0, 2, 1, 3)
    got_kv = cache_lib.write_kv(jnp.asarray(kv, jnp.float32), jnp.asarray(new_kv, jnp.float32),
                                jnp.asarray(index))
    np.testing.assert_allclose(got_kv, want_kv, rtol=1e-6)
    with pytest.raises(AssertionError, match="rank"):       # one index for the whole batch
        cache_lib.write(jnp.asarray(buf), jnp.asarray(new), jnp.full((2,), index))


def test_grow_appends_empty_slots_and_keeps_the_bookkeeping():
    c = _filled(1)
    g = cache_lib.grow(c, 4, CFG.max_seq_len)
    assert g.max_len == 10
    for old, new in zip(c.k + c.v, g.k + g.v):
        np.testing.assert_array_equal(new[:, :, :6], old)
        assert new.shape == (B, 2, 10, 8) and not new[:, :, 6:].any()
    np.testing.assert_array_equal(g.mask, np.pad(np.asarray(c.mask), ((0, 0), (0, 4))))
    assert int(g.index) == 3
    np.testing.assert_array_equal(g.lengths, c.lengths)


def test_pad_left_prepends_empty_slots_and_shifts_the_index():
    c = _filled(2)
    assert cache_lib.pad_left(c, 0) is c
    p = cache_lib.pad_left(c, PAD)
    assert p.max_len == 6 + PAD and int(p.index) == 3 + PAD
    for old, new in zip(c.k + c.v, p.k + p.v):
        np.testing.assert_array_equal(new[:, :, PAD:], old)
        assert not new[:, :, :PAD].any()
    np.testing.assert_array_equal(p.mask, np.pad(np.asarray(c.mask), ((0, 0), (PAD, 0))))
    np.testing.assert_array_equal(p.lengths, c.lengths)


def test_repeat_repeats_each_sequence_in_a_row():
    c = _filled(3)
    r = cache_lib.repeat(c, 3)
    rows = [0, 0, 0, 1, 1, 1]
    for old, new in zip(c.k + c.v, r.k + r.v):
        np.testing.assert_array_equal(new, np.asarray(old)[rows])
    np.testing.assert_array_equal(r.mask, np.asarray(c.mask)[rows])
    np.testing.assert_array_equal(r.lengths, np.asarray(c.lengths)[rows])
    assert int(r.index) == 3


# -- decoding with the cache ----------------------------------------------------------------

@pytest.fixture(scope="module")
def model():
    """A Decoder of CFG with every parameter drawn at 0.3 N(0, 1) (not the 0.02 init: a
    wrong slot or position shows in the logits); graphdef, state and two jitted passes."""
    m = Decoder(CFG, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    nnx.update(m, jax.tree.map(lambda w: jnp.asarray(0.3 * rng.normal(size=w.shape), w.dtype),
                               nnx.state(m, nnx.Param)))
    graphdef, state = nnx.split(m)

    @jax.jit
    def full(ids, mask):
        return nnx.merge(graphdef, state)(ids, mask)

    @jax.jit
    def step(cache, ids, mask):
        logits, _, cache = nnx.merge(graphdef, state).forward(ids, mask, cache=cache)
        return logits, cache
    return full, step


@pytest.fixture(scope="module")
def tokens(model):
    """ids, mask [B, P + N] (row 1's prompt left-padded by 2) and the uncached logits."""
    rng = np.random.default_rng(2)
    ids = rng.integers(0, CFG.vocab_size, (B, P + N)).astype(np.int32)
    mask = np.ones((B, P + N), bool)
    mask[1, :2] = False
    return ids, mask, np.asarray(model[0](jnp.asarray(ids), jnp.asarray(mask)))


def _decode(step, cache, ids, mask, prompt_done=False):
    """Prefill the prompt (unless prompt_done), then one step per token: -> logits [B', P + N]
    (the prompt's from the prefill) or [B', N], and the cache."""
    got = []
    if not prompt_done:
        logits, cache = step(cache, jnp.asarray(ids[:, :P]), jnp.asarray(mask[:, :P]))
        got.append(np.asarray(logits))
    for t in range(P, P + N):
        logits, cache = step(cache, jnp.asarray(ids[:, t:t + 1]), jnp.asarray(mask[:, t:t + 1]))
        got.append(np.asarray(logits))
    return np.concatenate(got, 1), cache


def test_cached_decoding_equals_the_uncached_pass_at_every_real_position(model, tokens):
    ids, mask, full = tokens
    t = P + N + PAD                     # the same width as the prompt_pass arrangement below
    got, cache = _decode(model[1], cache_lib.init_cache(CFG, B, t), ids, mask)
    np.testing.assert_allclose(got[mask], full[mask], rtol=1e-4, atol=1e-4)
    assert int(cache.index) == P + N
    np.testing.assert_array_equal(cache.lengths, mask.sum(1))
    np.testing.assert_array_equal(cache.mask, np.pad(mask, ((0, 0), (0, PAD))))
    for buf in cache.k + cache.v:
        assert np.asarray(buf[:, :, :P + N]).any(-1).all() and not buf[:, :, P + N:].any()


def test_a_prompt_wide_cache_padded_left_and_grown_decodes_the_same(model, tokens):
    """generate.prompt_pass: the prompt into a cache of its own width, PAD empty slots on
    the left, N after; the decoded tokens' logits are the uncached ones."""
    ids, mask, full = tokens
    step = model[1]
    logits, cache = step(cache_lib.init_cache(CFG, B, P), jnp.asarray(ids[:, :P]),
                         jnp.asarray(mask[:, :P]))
    np.testing.assert_allclose(np.asarray(logits)[mask[:, :P]], full[:, :P][mask[:, :P]],
                               rtol=1e-4, atol=1e-4)
    cache = cache_lib.grow(cache_lib.pad_left(cache, PAD), N, CFG.max_seq_len)
    got, cache = _decode(step, cache, ids, mask, prompt_done=True)
    np.testing.assert_allclose(got, full[:, P:], rtol=1e-4, atol=1e-4)
    assert int(cache.index) == PAD + P + N and not np.asarray(cache.mask)[:, :PAD].any()


def test_a_repeated_cache_decodes_each_copy_as_its_row(model, tokens):
    """rl.policy / rl.generation: a prompt's cache repeated k = 2 times, each copy then
    continued by its own tokens, gives each continuation's uncached logits."""
    ids, mask, full = tokens
    step = model[1]
    _, cache = step(cache_lib.init_cache(CFG, B, P + N + PAD), jnp.asarray(ids[:, :P]),
                    jnp.asarray(mask[:, :P]))
    rng = np.random.default_rng(3)
    cont = rng.integers(0, CFG.vocab_size, (2 * B, N)).astype(np.int32)
    cont[0::2] = ids[:, P:]                         # copy 0 of each row: the row's own tokens
    ids2 = np.concatenate([np.repeat(ids[:, :P], 2, 0), cont], 1)
    mask2 = np.repeat(mask, 2, 0)
    got, _ = _decode(step, cache_lib.repeat(cache, 2), ids2, mask2, prompt_done=True)
    want = np.asarray(model[0](jnp.asarray(ids2), jnp.asarray(mask2)))[:, P:]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0::2], full[:, P:], rtol=1e-4, atol=1e-4)
    assert np.abs(got[1::2] - got[0::2]).max() > 1e-2   # the other copies did go their own way
