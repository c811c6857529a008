"""asct_jax.models.weights: `hf_param_names` are exactly the tensors of transformers'
Llama / Qwen2 state dict of the config (less those `is_ignorable`); `assign` puts each
tensor, of transformers' shape, at its own place in an `abstract_decoder` (Linear weights
transposed, a layer's tensor in its slice of the stacked [L, ...] weight, cast to the
parameter dtype), every element written once; wrong shapes and names without a place are
one-line errors naming the source and the tensor; `finish` refuses missing tensors,
leaves jax arrays, zeroes the value head and draws the LoRA adapters from its seed
(B = 0, A bounded, one draw per layer). End to end through real checkpoints:
tests/asct_jax/models/test_loading.py and test_decoder.py."""
import jax
import numpy as np
import pytest
from flax import nnx

from asct_jax.models import weights
from asct_jax.models.config import ModelConfig

BASE = dict(vocab_size=24, hidden_size=16, num_layers=2, num_heads=4, num_kv_heads=2,
            head_dim=4, intermediate_size=20)
CASES = {"qwen2": ModelConfig(**BASE, qkv_bias=True, tie_embeddings=False),
         "llama": ModelConfig(**BASE, qkv_bias=False, tie_embeddings=True)}
SRC = "ckpt/model.safetensors"


def _hf_shapes(c: ModelConfig):
    """{name: shape} of transformers' state dict of a model of `c` (nn.Linear weights are
    [out, in]; checked once against LlamaForCausalLM / Qwen2ForCausalLM's on the meta
    device), plus a buffer older checkpoints carry. A tied model's state dict lists
    lm_head.weight too."""
    h, q, kv, i = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, \
        c.intermediate_size
    shapes = {"model.embed_tokens.weight": (c.vocab_size, h), "model.norm.weight": (h,),
              "lm_head.weight": (c.vocab_size, h), "model.rotary_emb.inv_freq": (2,)}
    for layer in range(c.num_layers):
        pre = f"model.layers.{layer}."
        out_in = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h),
                  "self_attn.v_proj": (kv, h), "self_attn.o_proj": (h, q),
                  "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h), "mlp.down_proj": (h, i)}
        shapes |= {pre + m + ".weight": s for m, s in out_in.items()}
        shapes |= {pre + "input_layernorm.weight": (h,),
                   pre + "post_attention_layernorm.weight": (h,)}
        if c.qkv_bias:
            shapes |= {pre + f"self_attn.{p}_proj.bias": (out_in[f"self_attn.{p}_proj"][0],)
                       for p in "qkv"}
    return shapes


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    return request.param, CASES[request.param], _hf_shapes(CASES[request.param])


def _tensors(config, shapes):
    """Every required tensor, tensor k filled with k + 1 (one value per tensor)."""
    names = weights.hf_param_names(config)
    return {n: np.full(shapes[n], k + 1.0, np.float32) for k, n in enumerate(names)}


def _load(config, tensors, seed=0):
    model = weights.abstract_decoder(config)
    for name, t in tensors.items():
        weights.assign(model, name, t, SRC)
    return weights.finish(model, set(tensors), SRC, seed)


# -- names ----------------------------------------------------------------------------------

def test_the_names_are_transformers_tensors_less_the_ignorable(case):
    kind, config, shapes = case
    names = weights.hf_param_names(config)
    assert len(names) == len(set(names))
    assert set(names) == {n for n in shapes if not weights.is_ignorable(n, config)}
    assert weights.is_ignorable("model.rotary_emb.inv_freq", config)
    assert weights.is_ignorable("model.layers.3.self_attn.rotary_emb.inv_freq", config)
    assert weights.is_ignorable("lm_head.weight", config) == config.tie_embeddings
    assert not weights.is_ignorable("model.norm.weight", config)


def test_the_name_count_follows_layers_head_and_bias():
    for tie in (True, False):
        for bias in (True, False):
            for layers in (1, 3):
                c = ModelConfig(**{**BASE, "num_layers": layers}, tie_embeddings=tie,
                                qkv_bias=bias)
                assert len(weights.hf_param_names(c)) == (2 + (not tie)
                                                          + layers * (9 + 3 * bias))


def test_the_abstract_decoder_holds_shapes_only():
    config = CASES["qwen2"]
    model = weights.abstract_decoder(config)
    kernel = model.layers.self_attn.k_proj.kernel
    assert isinstance(kernel.get_value(), jax.ShapeDtypeStruct)
    assert kernel.shape == (2, 16, 2 * 4) and model.embed_tokens.embedding.shape == (24, 16)


# -- assign and finish -----------------------------------------------------------------------

def test_every_tensor_lands_once_and_fills_every_base_weight(case):
    kind, config, shapes = case
    tensors = _tensors(config, shapes)
    model = _load(config, tensors)
    base = {k: np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(
        nnx.state(model)) if "value_head" not in jax.tree_util.keystr(k)}
    values = np.concatenate([v.ravel() for v in base.values()])
    assert not (values == 0).any()                        # nothing left unwritten
    counts = dict(zip(*np.unique(values, return_counts=True)))
    assert counts == {k + 1.0: t.size for k, t in enumerate(tensors.values())}


def test_linear_weights_are_transposed_and_layer_tensors_fill_their_slice(case):
    kind, config, shapes = case
    tensors = _tensors(config, shapes)
    rng = np.random.default_rng(0)
    for name in tensors:
        tensors[name] = rng.normal(size=tensors[name].shape).astype(np.float32)
    model = _load(config, tensors)
    t, layers = tensors, model.layers
    np.testing.assert_array_equal(model.embed_tokens.embedding[...], t["model.embed_tokens.weight"])
    np.testing.assert_array_equal(model.norm.scale[...], t["model.norm.weight"])
    for i in range(config.num_layers):
        pre = f"model.layers.{i}."
        np.testing.assert_array_equal(layers.self_attn.k_proj.kernel[...][i],
                                      t[pre + "self_attn.k_proj.weight"].T)
        np.testing.assert_array_equal(layers.mlp.down_proj.kernel[...][i],
                                      t[pre + "mlp.down_proj.weight"].T)
        np.testing.assert_array_equal(layers.post_attention_layernorm.scale[...][i],
                                      t[pre + "post_attention_layernorm.weight"])
        if config.qkv_bias:
            np.testing.assert_array_equal(layers.self_attn.v_proj.bias[...][i],
                                          t[pre + "self_attn.v_proj.bias"])
    if not config.tie_embeddings:
        np.testing.assert_array_equal(model.lm_head.kernel[...], t["lm_head.weight"].T)


def test_a_tensor_is_cast_to_the_parameter_dtype_and_finish_leaves_jax_arrays():
    config = CASES["llama"].replace(param_dtype="bfloat16")
    model = _load(config, _tensors(config, _hf_shapes(CASES["llama"])))
    leaves = jax.tree.leaves(nnx.state(model))
    assert all(isinstance(x, jax.Array) for x in leaves)
    for var in (model.layers.mlp.up_proj.kernel, model.embed_tokens.embedding, model.norm.scale):
        assert var[...].dtype == jax.numpy.bfloat16
    assert model.value_head.kernel[...].dtype == jax.numpy.float32


def test_finish_zeroes_the_value_head():
    config = CASES["llama"]
    model = weights.abstract_decoder(config)
    names = weights.hf_param_names(config)
    model.value_head.kernel.set_value(np.ones(model.value_head.kernel.shape, np.float32))
    for n, t in _tensors(config, _hf_shapes(CASES["llama"])).items():
        weights.assign(model, n, t, SRC)
    model = weights.finish(model, set(names), SRC)
    assert not np.asarray(model.value_head.kernel[...]).any()
    assert not np.asarray(model.value_head.bias[...]).any()


def test_lora_adapters_start_at_the_base_and_are_drawn_from_the_seed():
    config = CASES["qwen2"].replace(lora_rank=3, lora_targets=("q_proj", "up_proj"))
    tensors = _tensors(config, _hf_shapes(CASES["qwen2"]))
    a0, a0_again, a1 = (_load(config, tensors, seed) for seed in (0, 0, 1))
    for m in (a0, a1):
        for proj, d_in in ((m.layers.self_attn.q_proj, 16), (m.layers.mlp.up_proj, 16)):
            a, b = np.asarray(proj.lora_a[...]), np.asarray(proj.lora_b[...])
            assert a.shape == (2, d_in, 3) and not b.any()
            assert np.abs(a).max() <= d_in ** -0.5 and np.abs(a).min() > 0
            assert not np.array_equal(a[0], a[1])          # one draw per layer
    q = lambda m: np.asarray(m.layers.self_attn.q_proj.lora_a[...])  # noqa: E731
    assert np.array_equal(q(a0), q(a0_again)) and not np.array_equal(q(a0), q(a1))
    assert not np.array_equal(q(a0), np.asarray(a0.layers.mlp.up_proj.lora_a[...]))


# -- refusals ----------------------------------------------------------------------------------

def test_a_wrong_shape_names_source_tensor_and_both_shapes_in_transformers_layout():
    model = weights.abstract_decoder(CASES["qwen2"])
    cases = [("model.layers.1.self_attn.k_proj.weight", (8, 15), (8, 16)),
             ("model.layers.0.self_attn.q_proj.bias", (15,), (16,)),
             ("model.embed_tokens.weight", (16, 24), (24, 16)),
             ("lm_head.weight", (16, 24), (24, 16))]
    for name, wrong, expected in cases:
        with pytest.raises(ValueError) as e:
            weights.assign(model, name, np.zeros(wrong, np.float32), SRC)
        assert str(e.value) == (f"{SRC}: tensor {name!r} has shape {wrong}, "
                                f"expected {expected}")


@pytest.mark.parametrize("name", [
    "model.layers.2.mlp.up_proj.weight",          # layer L of an L-layer model
    "model.layers.0.mlp.fc1.weight",              # no such module
    "model.layers.0.input_layernorm.bias",        # RMSNorm has no bias
    "model.embed_tokens.0.weight",                # a layer index outside model.layers
    "model.layers.0.self_attn.q_proj.scale",      # no such leaf
    "lm_head.weight",                             # the tied model has no head
])
def test_a_tensor_with_no_place_is_one_line_naming_source_and_tensor(name):
    model = weights.abstract_decoder(CASES["llama"])
    with pytest.raises(ValueError) as e:
        weights.assign(model, name, np.zeros((16, 16), np.float32), SRC)
    assert str(e.value) == (f"{SRC}: tensor {name!r} has no place in this architecture "
                            "(wrong model_type or config?)")


@pytest.mark.parametrize("name", ["model.layers.0.self_attn.o_proj.bias",
                                  "model.layers.0.mlp.gate_proj.bias",
                                  "model.layers.0.self_attn.q_proj.bias"])
def test_a_bias_the_architecture_lacks_is_refused_naming_it(name):
    model = weights.abstract_decoder(CASES["llama"])          # qkv_bias=False
    with pytest.raises(ValueError, match="has no place in this architecture"):
        weights.assign(model, name, np.zeros((16,), np.float32), SRC)


def test_finish_names_the_first_five_missing_tensors():
    config = CASES["qwen2"]
    names = weights.hf_param_names(config)
    tensors = _tensors(config, _hf_shapes(CASES["qwen2"]))
    for missing, suffix in ((names[3:4], ""), (names[-7:], " ...")):
        model = weights.abstract_decoder(config)
        for n in names:
            if n not in missing:
                weights.assign(model, n, tensors[n], SRC)
        with pytest.raises(ValueError) as e:
            weights.finish(model, set(names) - set(missing), SRC)
        assert str(e.value) == f"{SRC}: missing tensor(s) {missing[:5]}{suffix}"
