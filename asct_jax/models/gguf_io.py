"""Reading a GGUF file (llama.cpp format): config, dequantised tensors, tokenizer.

Tensors are read and dequantised with the `gguf` package and renamed to
transformers' names with gguf's own tensor-name map. llama.cpp's converter
permutes the rows of the Q and K projections of `llama` models for its rotary
layout (interleaved pairs); `unpermute_qk` undoes it (Qwen2 files are not permuted).
"""
from __future__ import annotations

import os
from typing import Any, Iterator, Tuple

import gguf
import numpy as np

from asct_jax.models import weights
from asct_jax.models.config import ModelConfig

SUPPORTED_ARCHS = ("llama", "qwen2")
_PERMUTED_ARCHS = ("llama",)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute`: rows [n_head, D/2, 2] -> [n_head, 2, D/2].

    w: [n_head * D, ...] (a Q or K weight [out, in], or a bias [out]); for K pass num_kv_heads.
    """
    d = w.shape[0] // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def read_config(reader: gguf.GGUFReader, path: str, **overrides: Any) -> Tuple[str, ModelConfig]:
    """(architecture, ModelConfig) from the GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"{path}: GGUF architecture {arch!r} is not supported; supported: {SUPPORTED_ARCHS}")
    get = lambda key, default=None: _field(reader, key.format(arch=arch), default)
    rope_scaling = get(gguf.Keys.Rope.SCALING_TYPE)
    if rope_scaling not in (None, "none"):
        raise ValueError(f"{path}: rope scaling {rope_scaling!r} is not supported")
    names = {t.name for t in reader.tensors}
    hidden, heads = get(gguf.Keys.LLM.EMBEDDING_LENGTH), get(gguf.Keys.Attention.HEAD_COUNT)
    vocab = get(gguf.Keys.LLM.VOCAB_SIZE) or len(reader.fields["tokenizer.ggml.tokens"].data)
    fields = dict(
        vocab_size=int(vocab),
        hidden_size=int(hidden),
        num_layers=int(get(gguf.Keys.LLM.BLOCK_COUNT)),
        num_heads=int(heads),
        num_kv_heads=int(get(gguf.Keys.Attention.HEAD_COUNT_KV, heads)),
        head_dim=int(get(gguf.Keys.Attention.KEY_LENGTH, hidden // heads)),
        intermediate_size=int(get(gguf.Keys.LLM.FEED_FORWARD_LENGTH)),
        rope_theta=float(get(gguf.Keys.Rope.FREQ_BASE, 10_000.0)),
        rms_norm_eps=float(get(gguf.Keys.Attention.LAYERNORM_RMS_EPS)),
        tie_embeddings="output.weight" not in names,
        qkv_bias="blk.0.attn_q.bias" in names,
        max_seq_len=int(get(gguf.Keys.LLM.CONTEXT_LENGTH, 2048)),
    )
    fields.update(overrides)
    return arch, ModelConfig(**fields)


def iter_hf_tensors(reader: gguf.GGUFReader, arch: str, config: ModelConfig,
                    path: str) -> Iterator[Tuple[str, np.ndarray]]:
    """Yields (transformers name, float32 array in transformers layout) for every tensor."""
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    name_map = gguf.get_tensor_name_map(arch_enum, config.num_layers)
    to_hf = {}
    for hf_name in weights.hf_param_names(config) + ["lm_head.weight"]:
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is not None:
            to_hf[gguf_name] = hf_name
    for tensor in reader.tensors:
        if tensor.name not in to_hf:
            if tensor.name.startswith("rope_freqs"):
                raise ValueError(f"{path}: tensor 'rope_freqs' (rope scaling factors) is not supported")
            raise ValueError(f"{path}: tensor {tensor.name!r} has no place in a {arch} decoder")
        hf_name = to_hf[tensor.name]
        w = np.asarray(gguf.dequantize(tensor.data, tensor.tensor_type), np.float32)
        if arch in _PERMUTED_ARCHS and ".self_attn.q_proj." in hf_name:
            w = unpermute_qk(w, config.num_heads)
        elif arch in _PERMUTED_ARCHS and ".self_attn.k_proj." in hf_name:
            w = unpermute_qk(w, config.num_kv_heads)
        yield hf_name, w


def read_tokenizer(path: str):
    """A `PreTrainedTokenizerFast` built from the GGUF metadata by transformers' GGUF conversion."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    arch, tokenizer_dict, tokenizer_config = get_gguf_tokenizer(path)
    backend, extra = convert_gguf_tokenizer(arch, tokenizer_dict)
    return PreTrainedTokenizerFast(tokenizer_object=backend, name_or_path=os.path.basename(path),
                                   **tokenizer_config, **extra)
