"""Trains the policy with one credit method on one JAX-native environment.

    python -m experiments.train --config experiments/configs/base.py \
        --config.method=grpo --config.env.name=household --config.train.run=grpo_s42
"""
import sys

from asct_jax.infra import config_cli
from asct_jax.infra.checkpoint import NonFiniteLossError


def main(config):
    from experiments.runner import train_run

    try:
        summary = train_run(config)
    except (NonFiniteLossError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()})


if __name__ == "__main__":
    config_cli.run_main(main)
