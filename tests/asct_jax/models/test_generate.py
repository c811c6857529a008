"""generate / score: masks, stop tokens, consistency with each other, greedy parity with PyTorch."""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from asct_jax import models
from asct_jax.models import sampling
from tests.helpers import models as testing

# The package re-exports the function `generate`, which shadows the submodule attribute.
gen_lib = importlib.import_module("asct_jax.models.generate")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("llama"))
    torch_model = testing.tiny_hf_checkpoint(path, "llama", seed=1)
    return models.load_pretrained(path)[0], torch_model


def _prompts():
    """Two prompts of lengths 5 and 3, left-padded to 5."""
    ids = np.array([[11, 12, 13, 14, 15], [0, 0, 21, 22, 23]], np.int32)
    mask = ids != 0
    return ids, mask


def test_top_p_filter_keeps_nucleus():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda p: np.isfinite(np.asarray(sampling.top_p_filter(logits, jnp.float32(p))))[0]
    np.testing.assert_array_equal(kept(0.75), [True, True, False, False])
    np.testing.assert_array_equal(kept(0.85), [True, True, True, False])
    np.testing.assert_array_equal(kept(1e-6), [True, False, False, False])
    np.testing.assert_array_equal(kept(1.0), [True, True, True, True])


def test_greedy_matches_pytorch(llama):
    model, torch_model = llama
    ids = np.array([[3, 17, 42, 99, 7]], np.int32)
    out = models.generate(model, ids, np.ones_like(ids, bool), jax.random.key(0), max_new_tokens=12,
                          greedy=True)
    with torch.no_grad():
        x = torch.as_tensor(ids, dtype=torch.long)
        ref = torch_model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)[0, 5:].numpy()
    np.testing.assert_array_equal(np.asarray(out.tokens[0]), ref)
    assert np.asarray(out.mask).all()


@pytest.mark.slow
def test_stop_tokens_mask_and_padding(llama):
    model, _ = llama
    ids, mask = _prompts()
    free = models.generate(model, ids, mask, jax.random.key(0), max_new_tokens=8, greedy=True)
    stop = int(free.tokens[0, 2])
    first = [int(np.argmax(np.asarray(free.tokens[r]) == stop)) if stop in np.asarray(free.tokens[r]) else 8
             for r in range(2)]
    out = models.generate(model, ids, mask, jax.random.key(0), max_new_tokens=8, greedy=True, stop_tokens=(stop,))
    for r in range(2):
        n = min(first[r] + 1, 8)
        np.testing.assert_array_equal(np.asarray(out.mask[r]), np.arange(8) < n)
        np.testing.assert_array_equal(np.asarray(out.tokens[r, :n]), np.asarray(free.tokens[r, :n]))
        assert (np.asarray(out.tokens[r, n:]) == gen_lib.PAD_ID).all()
        assert (np.asarray(out.logp[r, n:]) == 0).all()


def test_generate_logp_equals_score_and_one_compile(llama):
    model, _ = llama
    ids, mask = _prompts()
    before = gen_lib._generate._cache_size()
    out = models.generate(model, ids, mask, jax.random.key(1), max_new_tokens=6, temperature=1.0, top_p=0.9)
    out2 = models.generate(model, ids, mask, jax.random.key(2), max_new_tokens=6, temperature=0.7, top_p=1.0)
    assert gen_lib._generate._cache_size() == before + 1  # temperature / top_p / key do not recompile
    assert out.tokens.shape == out.logp.shape == out.mask.shape == (2, 6)
    assert out.tokens.dtype == jnp.int32 and out.logp.dtype == jnp.float32 and out.mask.dtype == jnp.bool_
    for o in (out, out2):
        logp = models.score(model, ids, mask, o.tokens, o.mask)
        np.testing.assert_allclose(np.asarray(logp), np.asarray(o.logp), atol=1e-4)
        assert (np.asarray(o.logp) <= 0).all()


def test_score_matches_full_forward_with_right_padded_prefix(llama):
    model, _ = llama
    prefix = np.array([[5, 6, 7, 0, 0]], np.int32)
    cont = np.array([[8, 9, 10, 0]], np.int32)
    logp = np.asarray(models.score(model, prefix, prefix != 0, cont, cont != 0))
    seq = np.array([[5, 6, 7, 8, 9, 10]], np.int32)
    logits = np.asarray(testing.jit_call(model, "__call__", jnp.asarray(seq)))[0]
    ref = jax.nn.log_softmax(logits, -1)[np.arange(2, 5), [8, 9, 10]]
    np.testing.assert_allclose(logp[0, :3], ref, atol=1e-5)
    assert logp[0, 3] == 0.0


@pytest.mark.slow
def test_generate_and_score_inside_outer_jit(llama):
    model, _ = llama
    graphdef, state = nnx.split(model)
    ids, mask = _prompts()

    @jax.jit
    def rollout(state, key):
        m = nnx.merge(graphdef, state)
        out = models.generate(m, ids, mask, key, max_new_tokens=4)
        return out, models.score(m, ids, mask, out.tokens, out.mask)

    out, logp = rollout(state, jax.random.key(3))
    np.testing.assert_allclose(np.asarray(logp), np.asarray(out.logp), atol=1e-4)
    grad = jax.grad(lambda s: models.score(nnx.merge(graphdef, s), ids, mask, out.tokens, out.mask).sum())(state)
    assert float(jnp.abs(grad["embed_tokens"]["embedding"][...]).sum()) > 0


def _ragged_prompts(b: int, p: int, longest: int, seed: int = 0):
    """b left-padded prompts of 1 .. longest real tokens in P = p columns."""
    rng = np.random.default_rng(seed)
    n = rng.integers(1, longest + 1, size=b)
    n[0] = longest
    ids = rng.integers(1, 50, size=(b, p)).astype(np.int32)
    ids[np.arange(p)[None] < (p - n)[:, None]] = 0
    return jnp.asarray(ids), jnp.asarray(ids != 0)


@pytest.mark.slow
@pytest.mark.parametrize("longest", [3, 9, 20])
def test_trimmed_prefill_equals_the_pass_on_every_column(llama, longest):
    """The prompt pass on the last W columns (models.widths) gives the logits and the
    cache's real slots of the pass on all P columns; generate (its prompt pass and decoding
    on a cache of W + N slots) writes the same tokens (sampled and greedy) with the same
    log-probs, batched and per row under vmap."""
    model, _ = llama
    graphdef, state = nnx.split(model)
    ids, mask = _ragged_prompts(5, 20, longest)

    @jax.jit
    def both(state, ids, mask):
        m = nnx.merge(graphdef, state)
        return gen_lib.prefill(m, ids, mask, 4, 1), gen_lib.prefill(m, ids, mask, 4, 4)

    (full, lg_full), (cut, lg_cut) = both(state, ids, mask)
    np.testing.assert_allclose(lg_cut, lg_full, atol=1e-5)
    np.testing.assert_array_equal(cut.mask, full.mask)
    np.testing.assert_array_equal(cut.lengths, full.lengths)
    assert int(cut.index) == int(full.index) == 20
    real = np.asarray(full.mask)[None, :, None, :, None]
    np.testing.assert_allclose(np.where(real, cut.k, 0), np.where(real, full.k, 0), atol=1e-5)
    np.testing.assert_allclose(np.where(real, cut.v, 0), np.where(real, full.v, 0), atol=1e-5)

    for greedy in (False, True):
        run = lambda ids, mask, key, b: models.generate(  # noqa: E731
            model, ids, mask, key, max_new_tokens=6, greedy=greedy, prefill_buckets=b)
        ref = run(ids, mask, jax.random.key(7), 1)
        out = run(ids, mask, jax.random.key(7), 4)
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        np.testing.assert_array_equal(out.mask, ref.mask)
        np.testing.assert_allclose(out.logp, ref.logp, atol=1e-5)
        keys = jax.random.split(jax.random.key(8), ids.shape[0])
        rows = lambda b: jax.jit(jax.vmap(lambda i, m, k: run(i[None], m[None], k, b)))(  # noqa: E731
            ids, mask, keys)
        ref, out = rows(1), rows(4)
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        np.testing.assert_allclose(out.logp, ref.logp, atol=1e-5)
