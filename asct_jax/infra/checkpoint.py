"""Orbax checkpoints of the train state, resuming from the newest readable one, and the
non-finite guard.

A thin layer over orbax.checkpoint.CheckpointManager, whose CheckpointManagerOptions do the
save interval, the keep-last-K and the step bookkeeping. Each step directory holds two
items: `state` (any pytree of arrays: params, optimiser state, PRNG keys, step counter;
sharded jax.Arrays are restored onto the target's sharding) and `extra` (a JSON dict:
data-loader position, RNG seeds, the logger's step, anything small).

Added here: saves never overwrite or interleave with existing steps (`discard_after(step)`
rolls back explicitly), a structure / shape / dtype mismatch with the target is a loud
CheckpointError, and `restore_latest_readable` resumes from the newest checkpoint that
reads back, moving unreadable newer ones aside (never deleting them). Every process of a
multi-process run (asct_jax.infra.distributed) calls the same methods; orbax writes each
array once and restores onto the target's shardings, whatever the mesh that wrote it:

    ckpt = Checkpointer(run_dir / "checkpoints", save_every=cfg.ckpt_every, keep=3)
    restored = restore_latest_readable(ckpt, state)   # None: nothing to resume
    start = 0 if restored is None else restored.step
    for step in range(start + 1, num_steps + 1):
        state, metrics = train_step(state, ...)
        check_finite(step, metrics, ckpt.latest_step())
        ckpt.save(step, state, {"step": step})          # no-op unless orbax says it is due
    ckpt.close()
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from asct_jax.infra import distributed

STATE, EXTRA = "state", "extra"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read back as asked."""

    def __init__(self, directory: Any, step: Optional[int], problem: str):
        self.directory, self.step, self.problem = str(directory), step, problem
        where = "" if step is None else f" step {step}"
        super().__init__(f"checkpoint {self.directory}{where}: {problem}")


class UnreadableCheckpointError(CheckpointError):
    """A checkpoint whose files are missing, truncated or corrupt."""


class NoReadableCheckpointError(CheckpointError):
    """Checkpoints exist, but none of them reads back."""


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
    """orbax CheckpointManager with a `state` pytree item and an `extra` JSON item.

    Args:
      directory: where step directories live (created).
      save_every: `save(step, ...)` writes only when orbax's FixedIntervalPolicy says the
        step is due (step % save_every == 0), unless forced.
      keep: how many most recent checkpoints orbax keeps (None: all).
      async_save: let orbax write in a background thread (call `wait()` / `close()`
        before reading or exiting). Off by default: "saved" then means "on disk".
    """

    def __init__(self, directory: Any, save_every: int = 1, keep: Optional[int] = 3,
                 async_save: bool = False):
        if save_every < 1:
            raise ValueError(f"save_every must be >= 1, got {save_every}")
        self.directory = os.path.abspath(os.fspath(directory))
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=save_every, max_to_keep=keep, create=True,
            enable_async_checkpointing=async_save,
            # orbax's interval policy alone (its default also saves the very first step).
            save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(save_every))
        self._manager = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={STATE: ocp.StandardCheckpointHandler(),
                           EXTRA: ocp.JsonCheckpointHandler()})

    def all_steps(self) -> list:
        """Finalised steps on disk, ascending."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> Optional[int]:
        self._manager.reload()
        return self._manager.latest_step()

    def should_save(self, step: int) -> bool:
        return self._manager.should_save(step)

    def save(self, step: int, state: Any, extra: Optional[Mapping[str, Any]] = None,
             force: bool = False) -> bool:
        """Writes `state` (pytree) and `extra` (JSON dict) as `step` if it is due (or forced).

        Returns True if a checkpoint was written (or started, with async_save). Raises
        CheckpointError for a step <= the latest one on disk, or when orbax fails.
        """
        latest = self.latest_step()
        if latest is not None and step <= latest:
            what = "already exists" if step in self.all_steps() else f"is older than step {latest}"
            raise CheckpointError(self.directory, step,
                                  f"{what}; refusing to overwrite or interleave "
                                  "(roll back explicitly with discard_after(step))")
        args = ocp.args.Composite(**{STATE: ocp.args.StandardSave(_storage_dict(state)),
                                     EXTRA: ocp.args.JsonSave(dict(extra or {}))})
        try:
            return bool(self._manager.save(step, args=args, force=force))
        except Exception as e:  # pylint: disable=broad-except
            raise CheckpointError(self.directory, step, f"save failed: {e}") from e

    def discard_after(self, step: Optional[int]) -> list:
        """Deletes every checkpoint newer than `step` (None: all). Returns their steps."""
        self.wait()
        gone = [s for s in self.all_steps() if step is None or s > step]
        for s in gone:
            self._manager.delete(s)
        return gone

    def set_aside(self, step: int) -> str:
        """Moves step `step` out of the manager's directory (kept, not deleted); returns
        where it went: `<directory>.unreadable/<step>-<time>`. In a multi-process run
        process 0 moves it and every process waits for the move."""
        self.wait()
        dest = os.path.join(self.directory + ".unreadable", f"{step}-{int(time.time())}")
        if distributed.is_primary():
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.move(os.path.join(self.directory, str(step)), dest)
        distributed.barrier(f"checkpoint_set_aside_{step}")
        self._manager.reload()
        return dest

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

    def _stored_meta(self, step: int) -> Any:
        """The stored state's metadata tree (leaves with .shape and .dtype)."""
        try:
            meta = self._manager.item_metadata(step)[STATE]
        except Exception as e:  # pylint: disable=broad-except
            raise UnreadableCheckpointError(
                self.directory, step, f"corrupt or unreadable metadata: {_brief(e)}") from e
        tree = getattr(meta, "tree", meta)
        if tree is None:
            raise UnreadableCheckpointError(self.directory, step, "no state metadata (corrupt?)")
        return tree

    def restore(self, target: Any, step: Optional[int] = None) -> Restored:
        """Reads `step` (default: the latest) into the structure and shardings of `target`.

        Raises CheckpointError for no checkpoint / no such step / a tree that differs from
        the target (structure, shapes, dtypes), UnreadableCheckpointError for missing,
        truncated or corrupt files. Never falls back to another step by itself.
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
            raise UnreadableCheckpointError(self.directory, step,
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
        """The newest step whose checkpoint reads back completely (verify), or None."""
        for step in reversed(self.all_steps()):
            try:
                self.verify(step)
                return step
            except CheckpointError:
                continue
        return None


def restore_latest_readable(ckpt: Checkpointer, target: Any,
                            log: Callable[[str], None] = None) -> Optional[Restored]:
    """Restores the newest checkpoint that reads back; None when there is none at all.

    Unreadable newer steps are moved aside (Checkpointer.set_aside, nothing is deleted) so
    that training can save those steps again; one line on stderr (or `log`) says which
    step was skipped, why, and which step is used.

    Raises:
      NoReadableCheckpointError: checkpoints exist but none reads back (nothing moved).
      CheckpointError: the newest readable step does not match `target` (structure,
        shapes, dtypes): a different model or config, not a damaged file.
    """
    _quiet_closed_loop_callbacks()
    steps = ckpt.all_steps()
    failures = []
    for step in reversed(steps):
        try:
            restored = ckpt.restore(target, step)
        except UnreadableCheckpointError as e:
            failures.append(e)
            continue
        if failures:
            for e in failures:
                ckpt.set_aside(e.step)
            skipped = "; ".join(f"step {e.step} ({e.problem})" for e in failures)
            (log or _stderr_line)(f"checkpoint: skipped unreadable {skipped}, moved to "
                                  f"{ckpt.directory}.unreadable; resuming from step {step}")
        return restored
    if failures:
        raise NoReadableCheckpointError(
            ckpt.directory, None, f"none of steps {steps} is readable (newest: step "
            f"{failures[0].step}: {failures[0].problem}); nothing was deleted")
    return None


def start_or_resume(ckpt: Checkpointer, state: Any, resume: bool):
    """(state, step) to train from: `state` at step 0, or the newest readable checkpoint
    when `resume` (restore_latest_readable). FileExistsError when checkpoints exist and
    `resume` is False: a run is never silently restarted over its own checkpoints."""
    if not resume:
        latest = ckpt.latest_step()
        if latest is not None:
            raise FileExistsError(
                f"{ckpt.directory} already has checkpoints (step {latest}); pass "
                "--config.train.resume=True to continue it or choose another --config.train.run")
        return state, 0
    restored = restore_latest_readable(ckpt, state)
    return (state, 0) if restored is None else (restored.state, restored.step)


def _quiet_closed_loop_callbacks() -> None:
    """A failed orbax read leaves tensorstore callbacks that fire after orbax's asyncio loop
    closed; Python prints each as an unraisable RuntimeError('Event loop is closed').
    Drops exactly those (every other unraisable exception is still reported)."""
    previous = sys.unraisablehook
    if getattr(previous, "_asct_quiet", False):
        return

    def hook(unraisable):
        value = unraisable.exc_value
        if not (isinstance(value, RuntimeError) and str(value) == "Event loop is closed"):
            previous(unraisable)

    hook._asct_quiet = True
    sys.unraisablehook = hook


def _stderr_line(text: str) -> None:
    sys.stderr.write(" ".join(text.split()) + "\n")
    sys.stderr.flush()
