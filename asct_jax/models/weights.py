"""Putting transformers-named weights ("model.layers.0.self_attn.q_proj.weight") into a `Decoder`.

Our module attribute names follow transformers', so a name maps to a module by
walking attributes; Linear weights [out, in] are transposed to NNX kernels [in, out].
"""
from __future__ import annotations

from typing import Any, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from asct_jax.models.config import ModelConfig
from asct_jax.models.decoder import Decoder
from asct_jax.models.layers import LoRALinear, lora_init

# Buffers some checkpoints carry that the model recomputes.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def hf_param_names(config: ModelConfig) -> List[str]:
    """The transformers tensor names a checkpoint of this config must provide."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_embeddings:
        names.append("lm_head.weight")
    for i in range(config.num_layers):
        pre = f"model.layers.{i}."
        names += [pre + "input_layernorm.weight", pre + "post_attention_layernorm.weight"]
        names += [pre + f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        names += [pre + f"self_attn.{p}_proj.weight" for p in ("q", "k", "v", "o")]
        if config.qkv_bias:
            names += [pre + f"self_attn.{p}_proj.bias" for p in ("q", "k", "v")]
    return names


def abstract_decoder(config: ModelConfig) -> Decoder:
    """A `Decoder` whose parameters are shape placeholders (no memory, no random init)."""
    return nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))


def is_ignorable(name: str, config: ModelConfig) -> bool:
    return name.endswith(_IGNORED_SUFFIXES) or (name == "lm_head.weight" and config.tie_embeddings)


def _variable(model: Decoder, name: str, source: str) -> tuple[nnx.Variable, bool, Optional[int]]:
    """The NNX variable for a transformers tensor name, whether to transpose into it, and
    the layer ("model.layers.<i>.") whose [L, ...] slice i it fills (None: not a layer's)."""
    parts = name.split(".")
    if parts[0] == "model":
        parts = parts[1:]
    node: Any = model
    layer = None
    try:
        for part in parts[:-1]:
            if part.isdigit() and node is model.layers:
                layer = int(part)
                if layer >= model.config.num_layers:
                    raise IndexError(layer)
            else:
                node = getattr(node, part)
        leaf = parts[-1]
        if leaf == "bias" and getattr(node, "bias", None) is not None:
            return node.bias, False, layer
        if leaf == "weight" and isinstance(node, nnx.Linear):
            return node.kernel, True, layer
        if leaf == "weight" and isinstance(node, nnx.Embed):
            return node.embedding, False, layer
        if leaf == "weight" and isinstance(node, nnx.RMSNorm):
            return node.scale, False, layer
    except (AttributeError, IndexError, TypeError):
        pass
    raise ValueError(f"{source}: tensor {name!r} has no place in this architecture "
                     f"(wrong model_type or config?)")


def assign(model: Decoder, name: str, tensor: Any, source: str) -> None:
    """Writes one transformers-layout tensor into the model, checking its shape. A layer's
    tensor fills its slice of the stacked [L, ...] weight, staged in a host buffer until
    `finish` (no device copy of the whole stack per layer)."""
    var, transpose, layer = _variable(model, name, source)
    value = np.asarray(tensor)
    if transpose:
        value = value.T
    shape = tuple(var.shape) if layer is None else tuple(var.shape)[1:]
    if value.shape != shape:
        raise ValueError(f"{source}: tensor {name!r} has shape {tuple(np.shape(tensor))}, expected "
                         f"{shape[::-1] if transpose else shape}")
    if layer is None:
        var.set_value(value.astype(var.dtype))
        return
    if not isinstance(var.get_value(), np.ndarray):
        var.set_value(np.zeros(var.shape, var.dtype))
    var.get_value()[layer] = value.astype(var.dtype)


def finish(model: Decoder, assigned: set, source: str, seed: int = 0) -> Decoder:
    """Checks every required tensor was assigned; zero-initialises the value head and
    initialises the LoRA adapters (if any) from `seed` (B = 0: the model is the base)."""
    missing = [n for n in hf_param_names(model.config) if n not in assigned]
    if missing:
        raise ValueError(f"{source}: missing tensor(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    for _, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Variable) and isinstance(var.get_value(), np.ndarray):
            var.set_value(jnp.asarray(var.get_value()))
    model.value_head.kernel.set_value(jnp.zeros(model.value_head.kernel.shape, jnp.float32))
    model.value_head.bias.set_value(jnp.zeros(model.value_head.bias.shape, jnp.float32))
    key = jax.random.key(seed)
    for i, (_, node) in enumerate(nnx.iter_graph(model)):
        if isinstance(node, LoRALinear):   # stacked [L, ...]: one draw per layer
            d_in, rank = node.lora_a.shape[-2:]
            keys = jax.random.split(jax.random.fold_in(key, i), node.lora_a.shape[0])
            a, b = jax.vmap(lambda k: tuple(p[...] for p in lora_init(
                k, d_in, node.lora_b.shape[-1], rank)))(keys)
            node.lora_a.set_value(a)
            node.lora_b.set_value(b)
    return model
