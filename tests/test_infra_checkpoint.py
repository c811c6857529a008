"""Tests for asct_jax.infra.checkpoint: round trip, keep-last-K, corrupt / incompatible."""
import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from asct_jax.infra.checkpoint import (CheckpointError, Checkpointer, NonFiniteLossError,
                                    check_finite)


def _state(seed=0, width=4):
    params = {"w": jax.random.normal(jax.random.key(seed), (3, width)),
              "b": jnp.zeros((width,), jnp.bfloat16)}
    opt = optax.adam(1e-3)
    return {"params": params, "opt": opt.init(params), "step": jnp.array(seed, jnp.int32),
            "key": jax.random.key(seed), "count": 3}


def _assert_trees_equal(a, b):
    a = jax.tree.map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(
        getattr(x, "dtype", np.float32), jax.dtypes.prng_key) else x, a)
    b = jax.tree.map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(
        getattr(x, "dtype", np.float32), jax.dtypes.prng_key) else x, b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_every_and_keep(tmp_path):
    ckpt = Checkpointer(tmp_path / "ck", save_every=2, keep=2)
    assert ckpt.latest_step() is None
    saved = [s for s in range(1, 8) if ckpt.save(s, _state(s), {"logger_step": s})]
    assert saved == [2, 4, 6]
    assert ckpt.save(7, _state(7), {"logger_step": 7}, force=True)
    assert ckpt.all_steps() == [6, 7]  # keep the last 2
    ckpt.close()

    again = Checkpointer(tmp_path / "ck", save_every=2, keep=2)
    state, extra, step = again.restore(_state(0))
    assert step == 7 and extra == {"logger_step": 7}
    _assert_trees_equal(state, _state(7))
    assert jax.dtypes.issubdtype(state["key"].dtype, jax.dtypes.prng_key)
    state6 = again.restore(_state(0), step=6).state
    _assert_trees_equal(state6, _state(6))
    assert again.last_good_step() == 7
    with pytest.raises(CheckpointError, match="step 3: no such step"):
        again.restore(_state(0), step=3)


def test_never_overwrites(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    ckpt.save(1, _state(1))
    ckpt.save(2, _state(2))
    with pytest.raises(CheckpointError, match="step 2: already exists"):
        ckpt.save(2, _state(5))
    with pytest.raises(CheckpointError, match="step 0: is older than step 2"):
        ckpt.save(0, _state(5))
    assert ckpt.discard_after(1) == [2]
    ckpt.save(2, _state(9))
    _assert_trees_equal(ckpt.restore(_state(0)).state, _state(9))


def test_incompatible_tree_is_a_clear_error(tmp_path):
    ckpt = Checkpointer(tmp_path / "ck")
    ckpt.save(5, _state(1))
    with pytest.raises(CheckpointError, match=r"ck step 5: incompatible: leaf \S+ is "
                       r"bfloat16\[4\] in the checkpoint, bfloat16\[5\] in the target"):
        ckpt.restore(_state(0, width=5))
    other = _state(0)
    other["extra_leaf"] = jnp.ones(2)
    with pytest.raises(CheckpointError, match="tree structure differs.*extra_leaf"):
        ckpt.restore(other)
    wrong_dtype = _state(0)
    wrong_dtype["step"] = jnp.array(0.0)
    with pytest.raises(CheckpointError, match="leaf step is int32"):
        ckpt.restore(wrong_dtype)
    with pytest.raises(CheckpointError, match="no checkpoint to restore"):
        Checkpointer(tmp_path / "empty").restore(_state(0))


@pytest.mark.parametrize("pattern,problem", [
    ("state/**/d/*", "corrupt or unreadable"),                  # every stored chunk
    ("state/manifest.ocdbt", "corrupt or unreadable"),           # the OCDBT manifest
    ("extra/metadata", "corrupt or unreadable: JSONDecodeError"),
])
def test_truncated_checkpoint_is_a_clear_error(tmp_path, pattern, problem):
    ckpt = Checkpointer(tmp_path / "ck", keep=3)
    ckpt.save(1, _state(1), {"a": 1})
    ckpt.save(2, _state(2), {"a": 2})
    files = [f for f in glob.glob(str(tmp_path / "ck" / "2" / pattern), recursive=True)
             if os.path.isfile(f)]
    assert files
    for f in files:
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
    with pytest.raises(CheckpointError, match=f"ck step 2: {problem}"):
        ckpt.restore(_state(0))
    assert ckpt.last_good_step() == 1
    assert ckpt.latest_step() == 2  # never silently dropped nor overwritten
    with pytest.raises(CheckpointError):
        ckpt.save(2, _state(3))
    assert ckpt.restore(_state(0), step=1).extra == {"a": 1}


def test_check_finite():
    check_finite(3, {"loss": jnp.array(1.0), "n": 4, "vec": np.ones(3)}, None)
    with pytest.raises(NonFiniteLossError) as info:
        check_finite(12, {"loss": jnp.array(jnp.nan), "kl": 0.1, "g": np.array([1, np.inf])}, 10)
    msg = str(info.value)
    assert msg.startswith("non-finite metrics at step 12: g=1 non-finite, loss=nan")
    assert msg.endswith("last good checkpoint: step 10")
    assert info.value.last_good_step == 10
    with pytest.raises(NonFiniteLossError, match="no checkpoint to go back to"):
        check_finite(1, {"loss": float("inf")}, None)
