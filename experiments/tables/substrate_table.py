"""Return of the initial and the final (greedy) policy for PPO and GRPO on each small
environment, mean ± sample std over seeds. Writes results/substrate_table/table.{md,json}."""
import os

from asct_jax.infra import config_cli
from experiments.harness.runner import run_grid, write_table

METRICS = {"initial/return": "initial return", "final/return": "final return",
           "initial/env/score": "initial score", "final/env/score": "final score"}


def main(config):
    variants = [(f"{env}_{m}", {"method": m, "env.name": env})
                for env in config.table.envs for m in config.table.methods]
    results = run_grid(config, variants, tuple(config.table.seeds), config.train.experiment)
    out = os.path.join(config.train.results_dir, config.train.experiment, "table")
    print(write_table(results, METRICS, out))


if __name__ == "__main__":
    config_cli.run_main(main)
