"""asct_jax.models.config: a ModelConfig refuses bad dtypes, head counts, LoRA targets and
ranks, attention blocks and odd head dims with one-line errors naming the field and what
is allowed (also through `replace` and `get_preset`); the presets are valid, distinct
objects untouched by overrides; `from_hf_config` reads a transformers Llama / Qwen2 config
back into the ModelConfig it was written from (transformers' own defaults where a field
is absent) and refuses every architecture it cannot run, naming the offending setting."""
import dataclasses
import types

import jax.numpy as jnp
import pytest
from hypothesis import given, strategies as st
from transformers import LlamaConfig, Qwen2Config

from asct_jax.models.config import LORA_TARGETS, PRESETS, ModelConfig, from_hf_config, get_preset

SMALL = dict(vocab_size=64, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
             head_dim=8, intermediate_size=48)


def _refused(match, **fields):
    with pytest.raises(ValueError, match=match) as e:
        ModelConfig(**{**SMALL, **fields})
    assert "\n" not in str(e.value)
    return str(e.value)


# -- ModelConfig ------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["dtype", "param_dtype"])
def test_a_dtype_outside_float32_and_bfloat16_is_refused_naming_the_field(field):
    assert _refused(rf"^ModelConfig\.{field}='float16'", **{field: "float16"}).endswith(
        "; allowed: ['bfloat16', 'float32']")
    _refused(rf"^ModelConfig\.{field}=", **{field: jnp.float32})   # a name, not a dtype


def test_the_dtype_names_map_to_jax_dtypes():
    c = ModelConfig(**SMALL, dtype="bfloat16")
    assert (c.jnp_dtype, c.jnp_param_dtype) == (jnp.bfloat16, jnp.float32)
    c = c.replace(dtype="float32", param_dtype="bfloat16")
    assert (c.jnp_dtype, c.jnp_param_dtype) == (jnp.float32, jnp.bfloat16)


@given(st.integers(1, 12), st.integers(1, 12))
def test_heads_must_be_a_multiple_of_the_kv_heads(num_heads, num_kv_heads):
    fields = dict(SMALL, num_heads=num_heads, num_kv_heads=num_kv_heads)
    if num_heads % num_kv_heads == 0:
        assert ModelConfig(**fields).num_heads == num_heads
    else:
        _refused(rf"^ModelConfig: num_heads={num_heads} is not a multiple of "
                 rf"num_kv_heads={num_kv_heads}$", **fields)


def test_zero_kv_heads_is_a_value_error_naming_the_field():
    _refused("num_kv_heads", num_kv_heads=0)


@given(st.lists(st.sampled_from(LORA_TARGETS + ("qkv_proj", "lm_head", "")), max_size=4))
def test_lora_targets_are_a_subset_of_the_projections(targets):
    unknown = sorted(set(targets) - set(LORA_TARGETS))
    if not unknown:
        assert ModelConfig(**SMALL, lora_targets=tuple(targets)).lora_targets == tuple(targets)
    else:
        text = _refused(r"^ModelConfig\.lora_targets has ", lora_targets=tuple(targets))
        assert text == f"ModelConfig.lora_targets has {unknown}; allowed: {LORA_TARGETS}"


@pytest.mark.parametrize("field,value,match", [
    ("lora_rank", -1, r"^ModelConfig\.lora_rank=-1; allowed: >= 0 \(0 = no LoRA\)$"),
    ("attention_block", -4, r"^ModelConfig\.attention_block=-4; allowed: >= 0 "),
    ("head_dim", 7, r"^ModelConfig: head_dim=7 must be even for rotary embeddings$"),
])
def test_negative_ranks_and_blocks_and_odd_head_dims_are_refused(field, value, match):
    _refused(match, **{field: value})
    ok = {"lora_rank": 0, "attention_block": 0, "head_dim": 2}[field]
    assert getattr(ModelConfig(**{**SMALL, field: ok}), field) == ok     # the edge passes


def test_replace_validates_and_leaves_the_original_alone():
    c = ModelConfig(**SMALL)
    d = c.replace(lora_rank=4, attention_block=16)
    assert (d.lora_rank, d.attention_block, c.lora_rank, c.attention_block) == (4, 16, 0, 0)
    with pytest.raises(ValueError, match=r"^ModelConfig\.lora_rank=-2"):
        c.replace(lora_rank=-2)
    assert hash(c) == hash(ModelConfig(**SMALL)) and c != d      # a jit static argument


# -- presets ------------------------------------------------------------------------------

def test_get_preset_applies_overrides_to_a_copy():
    tiny = PRESETS["tiny"]
    got = get_preset("tiny", vocab_size=97, dtype="bfloat16")
    assert got == dataclasses.replace(tiny, vocab_size=97, dtype="bfloat16")
    assert PRESETS["tiny"] is tiny and tiny.vocab_size == 512 and tiny.dtype == "float32"
    assert get_preset("qwen2.5-7b") == PRESETS["qwen2.5-7b"]
    with pytest.raises(ValueError, match=r"^ModelConfig\.lora_rank=-1"):
        get_preset("tiny", lora_rank=-1)


def test_an_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError) as e:
        get_preset("qwen2.5-3b")
    assert str(e.value) == ("Unknown model preset 'qwen2.5-3b'; allowed: "
                            + ", ".join(PRESETS))


def _hf(kind, c: ModelConfig):
    """The transformers config a checkpoint of ModelConfig `c` ships (Qwen2 derives
    head_dim from hidden_size / heads and always has QKV bias)."""
    fields = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                  intermediate_size=c.intermediate_size, num_hidden_layers=c.num_layers,
                  num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
                  rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
                  tie_word_embeddings=c.tie_embeddings, max_position_embeddings=c.max_seq_len)
    if kind == "llama":
        return LlamaConfig(**fields, head_dim=c.head_dim, attention_bias=c.qkv_bias)
    assert c.qkv_bias and c.head_dim * c.num_heads == c.hidden_size
    return Qwen2Config(**fields)


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_the_config_of_its_transformers_checkpoint(name):
    kind = "qwen2" if name.startswith("qwen") else "llama"
    assert from_hf_config(_hf(kind, PRESETS[name])) == PRESETS[name]


# -- from_hf_config -------------------------------------------------------------------------

@st.composite
def hf_models(draw):
    kind = draw(st.sampled_from(["llama", "qwen2"]))
    kv, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    head_dim = 2 * draw(st.integers(1, 16))
    # Qwen2 derives head_dim = hidden / heads; Llama's is free, hidden a multiple of heads
    hidden = kv * group * (head_dim if kind == "qwen2" else 4 * draw(st.integers(1, 16)))
    return kind, ModelConfig(
        vocab_size=draw(st.integers(8, 5000)), hidden_size=hidden,
        num_layers=draw(st.integers(1, 40)), num_heads=kv * group, num_kv_heads=kv,
        head_dim=head_dim, intermediate_size=draw(st.integers(1, 512)),
        rope_theta=draw(st.sampled_from([1e4, 5e5, 1e6, 12_345.0])),
        rms_norm_eps=draw(st.sampled_from([1e-5, 1e-6])),
        tie_embeddings=draw(st.booleans()),
        qkv_bias=kind == "qwen2",     # Llama's attention_bias (o_proj too) is refused
        max_seq_len=draw(st.integers(16, 40_000)))


@given(hf_models())
def test_a_transformers_config_reads_back_into_its_model_config(case):
    kind, config = case
    assert from_hf_config(_hf(kind, config)) == config
    got = from_hf_config(_hf(kind, config), max_seq_len=64, lora_rank=2, dtype="bfloat16")
    assert got == config.replace(max_seq_len=64, lora_rank=2, dtype="bfloat16")


def test_llama_attention_bias_is_refused_naming_it():
    # transformers' Llama puts attention_bias on o_proj too, which this decoder lacks.
    with pytest.raises(ValueError, match=r"^Unsupported: attention_bias=True for llama "
                                         r"\(a bias on o_proj\); allowed: False$"):
        from_hf_config(_namespace(attention_bias=True))


def _namespace(**changes):
    fields = dict(model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=48,
                  num_hidden_layers=1, num_attention_heads=4, rms_norm_eps=1e-5,
                  rope_theta=500.0)
    fields.update(changes)
    return types.SimpleNamespace(**{k: v for k, v in fields.items() if v is not None})


def test_absent_optional_fields_take_transformers_defaults():
    got = from_hf_config(_namespace())
    assert (got.num_kv_heads, got.head_dim, got.tie_embeddings, got.qkv_bias,
            got.max_seq_len, got.rope_theta) == (4, 8, False, False, 2048, 500.0)
    got = from_hf_config(_namespace(num_key_value_heads=None, head_dim=None, model_type="qwen2"))
    assert (got.num_kv_heads, got.head_dim, got.qkv_bias) == (4, 8, True)
    got = from_hf_config(_namespace(rope_parameters={"rope_theta": 7.0}, rope_theta=9.0))
    assert got.rope_theta == 7.0                     # rope_parameters first


@pytest.mark.parametrize("changes,match", [
    (dict(model_type="gpt2"), r"^Unsupported architecture model_type='gpt2'; supported: "
                              r"\('llama', 'qwen2'\)$"),
    (dict(model_type=None), r"^Unsupported architecture model_type=None"),
    (dict(hidden_act="gelu"), r"^Unsupported hidden_act='gelu' \(only SwiGLU with silu\)$"),
    (dict(rope_parameters={"rope_type": "linear", "factor": 2.0}),
     r"^Unsupported rope_type='linear' \(only 'default' rotary embeddings\)$"),
    (dict(rope_parameters={"type": "yarn"}), r"^Unsupported rope_type='yarn'"),
    (dict(rope_theta=None), r"^HF config has neither rope_parameters\['rope_theta'\] nor "
                            r"rope_theta$"),
    (dict(use_sliding_window=True), r"^Unsupported: use_sliding_window=True$"),
    (dict(mlp_bias=True), r"^Unsupported: mlp_bias=True$"),
    (dict(num_attention_heads=3, num_key_value_heads=2, head_dim=8),
     r"^ModelConfig: num_heads=3 is not a multiple of num_kv_heads=2$"),
])
def test_an_architecture_it_cannot_run_is_refused_naming_the_setting(changes, match):
    with pytest.raises(ValueError, match=match):
        from_hf_config(_namespace(**changes))


def test_a_real_transformers_rope_scaling_is_refused():
    with pytest.raises(ValueError, match=r"^Unsupported rope_type='linear'"):
        from_hf_config(_hf("llama", PRESETS["tiny"]).__class__(
            rope_scaling={"rope_type": "linear", "factor": 2.0}))
