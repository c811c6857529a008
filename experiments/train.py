"""Trains the policy with one credit method on one JAX-native environment.

    python -m experiments.train --config experiments/configs/base.py \
        --config.method=grpo --config.env.name=household --config.train.run=grpo_s42

Several processes (one per host, config.train.distributed; docs/multihost.md) run the same
command; experiments.harness.launch_local starts them on one machine. Process 0 prints and writes.

Exit status 2 (one line on stderr) for a config error or when --config.train.resume=True
finds checkpoints of which none reads back (nothing is deleted); 1 for a non-finite loss
or a run directory that already holds checkpoints without resume.
"""
import os
import sys

from asct_jax.infra import config_cli
from asct_jax.infra.checkpoint import NonFiniteLossError, NoReadableCheckpointError
from asct_jax.infra.distributed import is_primary


def main(config):
    from experiments.harness.runner import train_run

    try:
        summary = train_run(config)
    except NoReadableCheckpointError as err:
        print(f"checkpoint error: {err}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(2)  # skips orbax's event-loop noise at interpreter exit: one line only
    except (NonFiniteLossError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    if is_primary():
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()})


if __name__ == "__main__":
    config_cli.run_main(main)
