"""Policy model: a Flax NNX Llama / Qwen2 decoder, KV-cache generation, scoring, loaders."""
from asct_jax.models.cache import KVCache, init_cache
from asct_jax.models.config import ModelConfig, from_hf_config, get_preset
from asct_jax.models.decoder import Decoder
from asct_jax.models.generate import GenerateOutput, generate, score
from asct_jax.models.loading import load_pretrained, smollm2_gguf_path

__all__ = [
    "Decoder", "GenerateOutput", "KVCache", "ModelConfig", "from_hf_config", "generate", "get_preset",
    "init_cache", "load_pretrained", "score", "smollm2_gguf_path",
]
