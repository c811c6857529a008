"""Decoder hyper-parameters (Llama / Qwen2 family) and named presets."""
from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a Llama / Qwen2 decoder.

    `dtype` is the compute dtype, `param_dtype` the storage dtype of the weights.
    Logits, log-probs and values are always returned in float32.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10_000.0
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    qkv_bias: bool = False
    max_seq_len: int = 2048
    dtype: str = "float32"
    param_dtype: str = "float32"
    # LoRA (Hu et al. 2021) on the named projections when lora_rank > 0:
    # W x + (lora_alpha / lora_rank) B A x, with A, B the only trainable decoder weights.
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple = LORA_TARGETS
    remat: bool = False   # rematerialise each block's activations in the backward pass
    # Uncached attention over S > attention_block tokens runs in query blocks of this size,
    # each under jax.checkpoint (`layers.blocked_attention`): its [B, N, S, S] logits and
    # probabilities become [B, N, block, S]. 0 = all queries at once.
    attention_block: int = 0
    # The value head reads stop_gradient(hidden): its regression trains the head alone and
    # sends no gradient into the decoder (or its adapters). False: the shared-trunk critic.
    value_detached: bool = False

    def __post_init__(self):
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"ModelConfig.{name}={getattr(self, name)!r}; allowed: {sorted(_DTYPES)}")
        if self.num_kv_heads < 1:
            raise ValueError(f"ModelConfig.num_kv_heads={self.num_kv_heads}; allowed: >= 1")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                    f"ModelConfig: num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        unknown = set(self.lora_targets) - set(LORA_TARGETS)
        if unknown:
            raise ValueError(f"ModelConfig.lora_targets has {sorted(unknown)}; allowed: {LORA_TARGETS}")
        if self.lora_rank < 0:
            raise ValueError(f"ModelConfig.lora_rank={self.lora_rank}; allowed: >= 0 (0 = no LoRA)")
        if self.attention_block < 0:
            raise ValueError(f"ModelConfig.attention_block={self.attention_block}; allowed: >= 0 "
                             "(0 = all queries at once)")
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig: head_dim={self.head_dim} must be even for rotary embeddings")

    @property
    def jnp_dtype(self):
        return _DTYPES[self.dtype]

    @property
    def jnp_param_dtype(self):
        return _DTYPES[self.param_dtype]

    def replace(self, **overrides: Any) -> "ModelConfig":
        return dataclasses.replace(self, **overrides)


PRESETS: dict[str, ModelConfig] = {
    # Trains on 2 CPU cores; vocab_size is usually overridden to match an environment's tokenizer.
    "tiny": ModelConfig(
        vocab_size=512, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
        intermediate_size=384, rope_theta=10_000.0, rms_norm_eps=1e-5, tie_embeddings=True,
        qkv_bias=False, max_seq_len=1024),
    # HuggingFaceTB/SmolLM2-135M-Instruct (Llama architecture).
    "smollm2-135m": ModelConfig(
        vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
        intermediate_size=1536, rope_theta=100_000.0, rms_norm_eps=1e-5, tie_embeddings=True,
        qkv_bias=False, max_seq_len=8192),
    # Qwen/Qwen2.5-*-Instruct (Qwen2 architecture: QKV bias).
    "qwen2.5-0.5b": ModelConfig(
        vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, head_dim=64,
        intermediate_size=4864, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_embeddings=True,
        qkv_bias=True, max_seq_len=32768),
    "qwen2.5-1.5b": ModelConfig(
        vocab_size=151936, hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2, head_dim=128,
        intermediate_size=8960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_embeddings=True,
        qkv_bias=True, max_seq_len=32768),
    "qwen2.5-7b": ModelConfig(
        vocab_size=152064, hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
        intermediate_size=18944, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_embeddings=False,
        qkv_bias=True, max_seq_len=32768),
}


def get_preset(name: str, **overrides: Any) -> ModelConfig:
    """The named preset, with `overrides` applied (e.g. dtype="bfloat16")."""
    if name not in PRESETS:
        raise ValueError(f"Unknown model preset {name!r}; allowed: {', '.join(PRESETS)}")
    return PRESETS[name].replace(**overrides)


_SUPPORTED_HF_TYPES = ("llama", "qwen2")


def from_hf_config(hf_config: Any, **overrides: Any) -> ModelConfig:
    """A `ModelConfig` from a transformers `PretrainedConfig` (Llama / Qwen2)."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in _SUPPORTED_HF_TYPES:
        raise ValueError(f"Unsupported architecture model_type={model_type!r}; supported: {_SUPPORTED_HF_TYPES}")
    act = getattr(hf_config, "hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"Unsupported hidden_act={act!r} (only SwiGLU with silu)")
    rope = getattr(hf_config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"Unsupported rope_type={rope_type!r} (only 'default' rotary embeddings)")
    rope_theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", None))
    if rope_theta is None:
        raise ValueError("HF config has neither rope_parameters['rope_theta'] nor rope_theta")
    if getattr(hf_config, "use_sliding_window", False):
        raise ValueError("Unsupported: use_sliding_window=True")
    if getattr(hf_config, "mlp_bias", False):
        raise ValueError("Unsupported: mlp_bias=True")
    num_heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // num_heads
    if model_type != "qwen2" and getattr(hf_config, "attention_bias", False):
        # Llama's attention_bias puts a bias on o_proj too, which this decoder has not.
        raise ValueError("Unsupported: attention_bias=True for llama (a bias on o_proj); "
                         "allowed: False")
    qkv_bias = model_type == "qwen2"
    fields = dict(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=num_heads,
            num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim,
            intermediate_size=hf_config.intermediate_size,
            rope_theta=float(rope_theta),
            rms_norm_eps=float(hf_config.rms_norm_eps),
            tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            max_seq_len=int(getattr(hf_config, "max_position_embeddings", 2048)),
    )
    fields.update(overrides)
    return ModelConfig(**fields)
