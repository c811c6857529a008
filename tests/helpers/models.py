"""Test helpers: tiny random transformers checkpoints (the PyTorch oracle) and jitted calls.

Needs torch (the `test` extra): only the tests import it (it was asct_jax/models/testing.py).
"""
from __future__ import annotations

import functools
import os
from typing import Any

import jax
from flax import nnx

TINY_HF = {
    # Qwen2: QKV bias, untied head, head_dim = hidden / heads.
    "qwen2": dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rope_theta=12_345.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    # Llama: tied head, head_dim (32) != hidden / heads (16), one KV head.
    "llama": dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                  rope_parameters={"rope_type": "default", "rope_theta": 500_000.0}, rms_norm_eps=1e-5,
                  tie_word_embeddings=True),
}


def tiny_hf_checkpoint(path: str, kind: str, seed: int = 0) -> Any:
    """Saves a tiny random transformers model ("qwen2" | "llama") to `path`; returns it (eval mode).

    All parameters (norm scales and biases included) are randomised so that a wrong
    mapping of any tensor shows in the logits.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM),
                             "llama": (LlamaConfig, LlamaForCausalLM)}[kind]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**TINY_HF[kind])).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if "norm" in name else 0.0) + 0.2 * torch.randn_like(p))
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    return model


def tiny_llm_folder(path: str, kind: str = "qwen2", seed: int = 0) -> str:
    """A tiny random HF checkpoint at a real vocabulary: the `kind` architecture of
    TINY_HF widened to SmolLM2's 49,152-token byte-level BPE tokenizer (from the shipped
    GGUF), saved with that tokenizer and its chat template. Returns `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from asct_jax.models import gguf_io
    from asct_jax.models.loading import smollm2_gguf_path

    tokenizer = gguf_io.read_tokenizer(smollm2_gguf_path())
    config_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM),
                             "llama": (LlamaConfig, LlamaForCausalLM)}[kind]
    torch.manual_seed(seed)
    fields = dict(TINY_HF[kind], vocab_size=len(tokenizer), max_position_embeddings=1024)
    model = model_cls(config_cls(**fields)).eval()
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@functools.partial(jax.jit, static_argnums=(0, 1))
def _call(method: str, graphdef, state, *args):
    return getattr(nnx.merge(graphdef, state), method)(*args)


def jit_call(model: nnx.Module, method: str = "__call__", *args) -> Any:
    """model.method(*args) under jit with the parameters passed as arguments (split / merge)."""
    graphdef, state = nnx.split(model)
    return _call(method, graphdef, state, *args)
