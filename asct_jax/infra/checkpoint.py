"""Orbax checkpoints of the train state, and the non-finite guard.

A thin layer over orbax.checkpoint.CheckpointManager. Each step directory holds two
items: `state` (any pytree of arrays: params, optimiser state, PRNG keys, step counter;
sharded jax.Arrays are restored onto the target's sharding) and `extra` (a JSON dict:
data-loader position, RNG seeds, the logger's step, anything small).

Guarantees:
  * atomic: orbax writes into a temporary directory and renames it on finalisation; a
    step that was not finalised (crash mid-save) is invisible to `all_steps()`.
  * keep the last K: older steps are deleted by orbax after a successful save.
  * never overwrite: saving a step <= the latest one on disk raises CheckpointError;
    discarding newer steps (a rollback) is an explicit call, `discard_after(step)`.
  * loud failures: a truncated / corrupt checkpoint, or one whose tree structure, shapes
    or dtypes differ from the target, raises CheckpointError naming the directory and
    the step; restore never falls back silently to another step or to a fresh state.

Usage in a training loop:

    ckpt = Checkpointer(workdir / "checkpoints", save_every=cfg.ckpt_every, keep=3)
    if ckpt.latest_step() is not None:
        state, extra, start = ckpt.restore(state)         # target = freshly initialised
    for step in range(start + 1, num_steps + 1):
        state, metrics = train_step(state, ...)
        check_finite(step, metrics, ckpt.latest_step())
        ckpt.save(step, state, {"logger_step": step})     # no-op unless step % every == 0
    ckpt.save(num_steps, state, force=True); ckpt.close()
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Mapping, NamedTuple, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

STATE, EXTRA = "state", "extra"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read back as asked."""

    def __init__(self, directory: Any, step: Optional[int], problem: str):
        self.directory, self.step, self.problem = str(directory), step, problem
        super().__init__(f"checkpoint {self.directory} step {step}: {problem}")


class NonFiniteLossError(FloatingPointError):
    """A training metric became NaN or infinite."""

    def __init__(self, step: int, bad: Mapping[str, float], last_good_step: Optional[int]):
        self.step, self.bad, self.last_good_step = step, dict(bad), last_good_step
        values = ", ".join(f"{k}={v}" for k, v in sorted(self.bad.items()))
        where = ("no checkpoint to go back to" if last_good_step is None
                 else f"last good checkpoint: step {last_good_step}")
        super().__init__(f"non-finite metrics at step {step}: {values}; {where}")


class Restored(NamedTuple):
    state: Any
    extra: Dict[str, Any]
    step: int


def check_finite(step: int, metrics: Mapping[str, Any],
                 last_good_step: Optional[int]) -> None:
    """Raises NonFiniteLossError if any metric (scalar or array) has a NaN or an inf.

    Fetches the metrics to the host (a sync point; call it once per step on the
    already-reduced metrics dict).
    """
    host = jax.device_get(dict(metrics))
    bad = {}
    for name, value in host.items():
        arr = np.asarray(value)
        if np.issubdtype(arr.dtype, np.inexact) and not np.all(np.isfinite(arr)):
            count = int(np.sum(~np.isfinite(arr)))
            bad[name] = float(arr) if arr.ndim == 0 else f"{count} non-finite"
    if bad:
        raise NonFiniteLossError(step, bad, last_good_step)


def _brief(error: Exception, limit: int = 300) -> str:
    """`Type: first line` of an exception, cut to `limit` characters."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= limit else text[:limit] + "..."


def _leaf_signature(x: Any):
    """(shape, dtype) of an array leaf as orbax stores it (typed PRNG keys as key data)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        x = jax.eval_shape(jax.random.key_data, x)
        dtype = x.dtype
    if dtype is None:  # python scalars
        return (), np.asarray(x).dtype
    return tuple(x.shape), np.dtype(dtype)


def _storage_dict(tree: Any) -> Dict[str, Any]:
    """Any pytree as a flat {path: leaf} dict, the form written to disk.

    Flattening first makes storage independent of container types (nnx.State, lists
    with integer keys, chex dataclasses) that orbax's own tree handling may not restore;
    restore unflattens with the target's treedef.
    """
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    out = {}
    for path, leaf in leaves:
        name = re.sub(r"[^A-Za-z0-9_]+", ".", jax.tree_util.keystr(path)).strip(".")
        if name in out:
            raise CheckpointError("<memory>", None, f"two leaves map to the key {name!r}")
        out[name] = leaf
    return out


def _flat(tree: Any) -> Dict[tuple, Any]:
    return ocp.tree.to_flat_dict(ocp.tree.serialize_tree(tree, keep_empty_nodes=False))


def _describe_mismatch(stored: Mapping[tuple, Any], target: Mapping[tuple, Any]) -> Optional[str]:
    """What differs between the stored metadata and the target tree, or None."""
    key = lambda path: "/".join(str(p) for p in path)  # noqa: E731
    missing = sorted(key(p) for p in target.keys() - stored.keys())
    unexpected = sorted(key(p) for p in stored.keys() - target.keys())
    if missing or unexpected:
        return (f"tree structure differs from the target: missing in checkpoint "
                f"{missing[:5]}, not in target {unexpected[:5]}")
    for path in sorted(target, key=key):
        meta = stored[path]
        if not hasattr(meta, "shape") or getattr(meta, "dtype", None) is None:
            continue
        want_shape, want_dtype = _leaf_signature(target[path])
        have = (tuple(meta.shape), np.dtype(meta.dtype))
        if hasattr(target[path], "shape") and have != (want_shape, want_dtype):
            return (f"leaf {key(path)} is {have[1]}{list(have[0])} in the checkpoint, "
                    f"{want_dtype}{list(want_shape)} in the target")
    return None


class Checkpointer:
    """Save every `save_every` steps, keep the last `keep`, restore or fail loudly.

    Args:
      directory: where step directories live (created).
      save_every: `save(step, ...)` writes only when step % save_every == 0 (or force).
      keep: how many most recent checkpoints to keep (None: all).
      async_save: let orbax write in a background thread (call `wait()` / `close()`
        before reading or exiting). Off by default: CPU runs are small and a synchronous
        save makes "saved" mean "on disk".
    """

    def __init__(self, directory: Any, save_every: int = 1, keep: Optional[int] = 3,
                 async_save: bool = False):
        if save_every < 1:
            raise ValueError(f"save_every must be >= 1, got {save_every}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.save_every = int(save_every)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True, enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={STATE: ocp.StandardCheckpointHandler(),
                           EXTRA: ocp.JsonCheckpointHandler()})

    # -- queries ---------------------------------------------------------------------
    def all_steps(self) -> list:
        """Finalised steps on disk, ascending."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> Optional[int]:
        """The newest finalised step, or None."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def should_save(self, step: int) -> bool:
        return step % self.save_every == 0

    # -- writing ---------------------------------------------------------------------
    def save(self, step: int, state: Any, extra: Optional[Mapping[str, Any]] = None,
             force: bool = False) -> bool:
        """Writes `state` (pytree) and `extra` (JSON dict) as `step` if it is due.

        Returns:
          True if a checkpoint was written (or started, with async_save).
        Raises:
          CheckpointError: step <= the latest saved step (never overwritten), or orbax
            failed.
        """
        if not (force or self.should_save(step)):
            return False
        steps = self.all_steps()
        if steps and step <= steps[-1]:
            what = "already exists" if step in steps else f"is older than step {steps[-1]}"
            raise CheckpointError(self.directory, step,
                                  f"{what}; refusing to overwrite or interleave "
                                  "(roll back explicitly with discard_after(step))")
        args = ocp.args.Composite(**{STATE: ocp.args.StandardSave(_storage_dict(state)),
                                     EXTRA: ocp.args.JsonSave(dict(extra or {}))})
        try:
            saved = self._manager.save(step, args=args, force=True)
        except Exception as e:  # pylint: disable=broad-except
            raise CheckpointError(self.directory, step, f"save failed: {e}") from e
        return bool(saved)

    def discard_after(self, step: Optional[int]) -> list:
        """Deletes every checkpoint newer than `step` (None: all). Returns their steps."""
        self.wait()
        gone = [s for s in self.all_steps() if step is None or s > step]
        for s in gone:
            self._manager.delete(s)
        return gone

    def wait(self) -> None:
        """Blocks until a pending async save is finalised."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------
    def _stored_meta(self, step: int) -> Any:
        """The stored state's metadata tree (leaves with .shape and .dtype)."""
        try:
            meta = self._manager.item_metadata(step)[STATE]
        except Exception as e:  # pylint: disable=broad-except
            raise CheckpointError(self.directory, step,
                                  f"corrupt or unreadable metadata: {_brief(e)}") from e
        tree = getattr(meta, "tree", meta)
        if tree is None:
            raise CheckpointError(self.directory, step, "no state metadata (corrupt?)")
        return tree

    def restore(self, target: Any, step: Optional[int] = None) -> Restored:
        """Reads `step` (default: the latest) into the structure and shardings of `target`.

        Args:
          target: a pytree like the saved state (a freshly initialised train state, or
            jax.ShapeDtypeStruct leaves with shardings).
          step: which step; None for the latest.
        Returns:
          Restored(state, extra, step).
        Raises:
          CheckpointError: no checkpoint, missing step, incompatible tree (structure,
            shapes, dtypes) or unreadable / truncated files.
        """
        self.wait()
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise CheckpointError(self.directory, None, "no checkpoint to restore")
            step = steps[-1]
        elif step not in steps:
            raise CheckpointError(self.directory, step, f"no such step; have {steps}")
        flat_target = _storage_dict(target)
        mismatch = _describe_mismatch(ocp.tree.to_flat_dict(self._stored_meta(step)),
                                      _flat(flat_target))
        if mismatch:
            raise CheckpointError(self.directory, step, f"incompatible: {mismatch}")
        args = ocp.args.Composite(**{STATE: ocp.args.StandardRestore(flat_target),
                                     EXTRA: ocp.args.JsonRestore()})
        try:
            out = self._manager.restore(step, args=args)
            flat = jax.block_until_ready(out[STATE])
            state = jax.tree.unflatten(jax.tree.structure(target),
                                       [flat[k] for k in flat_target])
        except Exception as e:  # pylint: disable=broad-except
            raise CheckpointError(self.directory, step,
                                  f"corrupt or unreadable: {_brief(e)}") from e
        return Restored(state, dict(out[EXTRA] or {}), step)

    def verify(self, step: int) -> None:
        """Reads every array of `step` back to the host; raises CheckpointError if it can't."""
        device = jax.local_devices()[0]
        abstract = jax.tree.map(
            lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype,
                                           sharding=jax.sharding.SingleDeviceSharding(device)),
            self._stored_meta(step))
        self.restore(abstract, step)

    def last_good_step(self) -> Optional[int]:
        """The newest step whose checkpoint reads back completely (verify), or None.

        Costs a full read per step tried, newest first; use it after a failure, not in
        the hot loop.
        """
        for step in reversed(self.all_steps()):
            try:
                self.verify(step)
                return step
            except CheckpointError:
                continue
        return None
