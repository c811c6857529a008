"""asct_jax/rl/params_io.py: save_params / load_params of a warm-start directory. The params
come back bit for bit (every dtype, nested structure) as step 0 of <directory>/checkpoint
with the `extra` JSON; a second save is refused; a missing directory, an empty checkpoint
folder or a tree of other shapes is a one-line ConfigError naming the field and the
directory. (A trained warm start read by train.init_from: tests/asct_jax/rl/test_warm_start.py.)"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.infra.checkpoint import CheckpointError, Checkpointer
from asct_jax.infra.checks import ConfigError
from asct_jax.rl.params_io import CHECKPOINT, load_params, save_params


def _params(seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"dense": {"kernel": jax.random.normal(k1, (3, 5), jnp.float32),
                      "bias": jax.random.normal(k2, (5,), jnp.bfloat16)},
            "embed": [jnp.arange(-6, 6, dtype=jnp.int32).reshape(4, 3),
                      jnp.asarray([np.nan, -0.0, np.inf, 1e-38], jnp.float32)],
            "scale": jnp.float32(3.25)}


def _zeros_like(tree):
    return jax.tree.map(jnp.zeros_like, tree)


def _bits(x):
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.itemsize > 1 else x


def test_save_then_load_is_bit_for_bit_in_the_targets_structure(tmp_path):
    params = _params(1)
    save_params(str(tmp_path), params, extra={"note": "warm", "steps": 7})
    got = load_params(str(tmp_path), _zeros_like(params))
    assert jax.tree.structure(got) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(_bits(a), _bits(b))      # NaN, -0.0 and bf16 included
    # where it is: step 0 of <directory>/checkpoint, with the extra JSON
    with Checkpointer(os.path.join(tmp_path, CHECKPOINT)) as ckpt:
        assert ckpt.all_steps() == [0]
        assert ckpt.restore(_zeros_like(params)).extra == {"note": "warm", "steps": 7}


def test_a_second_save_into_the_same_directory_is_refused(tmp_path):
    save_params(str(tmp_path), _params(0))
    with pytest.raises(CheckpointError, match="already exists"):
        save_params(str(tmp_path), _params(2))
    got = load_params(str(tmp_path), _zeros_like(_params(0)))       # the first one is kept
    np.testing.assert_array_equal(got["dense"]["kernel"], _params(0)["dense"]["kernel"])


@pytest.mark.parametrize("field", ["train.init_from", "warm_start.from"])
def test_no_checkpoint_is_a_one_line_error_naming_the_field_and_directory(tmp_path, field):
    missing = str(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    os.makedirs(empty / CHECKPOINT)                    # the folder, but no step in it
    for directory, words in [(missing, "has no warm-start checkpoint"),
                             (str(empty), "cannot start from")]:
        with pytest.raises(ConfigError, match=rf"^{field}: ") as e:
            load_params(directory, _params(0), field=field)
        msg = str(e.value)
        assert "\n" not in msg and repr(directory) in msg and words in msg, msg
        assert e.value.field == field


def test_a_tree_of_other_shapes_is_a_one_line_error_naming_the_directory(tmp_path):
    params = _params(0)
    save_params(str(tmp_path), params)
    wider = dict(params, dense={"kernel": jnp.zeros((3, 6)), "bias": params["dense"]["bias"]})
    other = dict(params, extra_leaf=jnp.zeros(2))
    for target in (wider, other):
        with pytest.raises(ConfigError, match=r"^train\.init_from: cannot start from ") as e:
            load_params(str(tmp_path), target)
        assert "\n" not in str(e.value) and repr(str(tmp_path)) in str(e.value)
        assert isinstance(e.value.__cause__, CheckpointError)
