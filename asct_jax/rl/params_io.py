"""The params of a warm-start directory: `save_params` writes them, `load_params` reads them
back (asct_jax.rl.trainer's train.init_from).

    save_params(directory, params, extra={...})   # <directory>/checkpoint, orbax step 0
    params = load_params(directory, target)       # target's structure and shardings
"""
from __future__ import annotations

import os
from typing import Any, Dict

from asct_jax.infra.checkpoint import CheckpointError, Checkpointer
from asct_jax.infra.checks import ConfigError

CHECKPOINT = "checkpoint"   # <warm-start directory>/checkpoint: the orbax step directory


def save_params(directory: str, params: Any, extra: Dict[str, Any] = None) -> None:
    """Writes `params` as step 0 of <directory>/checkpoint (orbax: written to a temporary
    directory, renamed when complete). CheckpointError if one is already there."""
    with Checkpointer(os.path.join(directory, CHECKPOINT), keep=None) as ckpt:
        ckpt.save(0, params, extra=extra, force=True)


def load_params(directory: str, target: Any, field: str = "train.init_from") -> Any:
    """The params saved by `save_params` in `directory`, in the structure and shardings of
    `target`; ConfigError (one line, naming `field`) when there is no readable checkpoint
    there or its tree does not match `target` (another model config)."""
    path = os.path.join(directory, CHECKPOINT)
    if not os.path.isdir(path):
        raise ConfigError(field, f"{directory!r} has no warm-start checkpoint ({CHECKPOINT}/)",
                          "a directory written by experiments.harness.warm_start, or ''")
    try:
        with Checkpointer(path) as ckpt:
            return ckpt.restore(target).state
    except CheckpointError as e:
        raise ConfigError(field, f"cannot start from {directory!r}: {e.problem}") from e
