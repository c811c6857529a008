"""GRPO and FACTOR trained on real TextWorld cooking games (host-side rollouts).

    python -m experiments.textworld_run --config experiments/configs/textworld.py:quick

Each (method, seed) run lives in results/<experiment>/<method>_s<seed>/ (see
asct_jax.rl.host_trainer); a finished run of the same config is not run again
(experiments.runner.run_grid). Writes
results/<experiment>/table.{md,json}: held-out success and score, initial vs final,
mean ± std over seeds.
"""
import os

from asct_jax.infra import config_cli
from experiments.runner import enable_compilation_cache, run_grid, write_table

METRICS = {
    "initial/env/success": "success (initial)", "final/env/success": "success (final)",
    "initial/env/score": "score (initial)", "final/env/score": "score (final)",
    "initial/env/norm_score": "score/max (initial)", "final/env/norm_score": "score/max (final)",
    "total/env_calls": "env calls", "wall_clock_s": "wall clock (s)",
}


def run_all(config):
    from asct_jax.rl.host_trainer import train_host

    variants = [(m, {"method": m}) for m in config.table.methods]
    return run_grid(config, variants, tuple(config.table.seeds), config.train.experiment,
                    train=train_host)


def main(config):
    enable_compilation_cache()
    results = run_all(config)
    tw = config.textworld
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    table = write_table(results, METRICS, os.path.join(out_dir, "table"))
    print(f"\n## TextWorld tw-cooking (recipe {tw.recipe}, take {tw.take}, go {tw.go}): "
          f"{tw.num_train} train / {tw.num_eval} held-out games, G = "
          f"{config.rollout.group_size}, {config.rollout.num_groups} games x G episodes a "
          f"step, {config.train.steps} steps, seeds {list(config.table.seeds)}; held-out: "
          f"{tw.eval_episodes} sampled episodes per game, max {tw.max_turns} turns\n")
    print(table)


if __name__ == "__main__":
    config_cli.run_main(main)
