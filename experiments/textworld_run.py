"""GRPO and FACTOR trained on real TextWorld cooking games (host-side rollouts).

    python -m experiments.textworld_run --config experiments/configs/textworld.py:quick

Each (method, seed) run lives in results/<experiment>/<method>_s<seed>/ (see
asct_jax.rl.host_trainer); a run whose summary.json exists is not run again. Writes
results/<experiment>/table.{md,json}: held-out success and score, initial vs final,
mean ± std over seeds.
"""
import json
import os

from asct_jax.rl import config_cli
from asct_jax.rl.run_logger import atomic_write_json
from experiments.runner import apply_overrides, enable_compilation_cache, write_table

METRICS = {
    "initial/env/success": "success (initial)", "final/env/success": "success (final)",
    "initial/env/score": "score (initial)", "final/env/score": "score (final)",
    "initial/env/norm_score": "score/max (initial)", "final/env/norm_score": "score/max (final)",
    "total/env_calls": "env calls", "wall_clock_s": "wall clock (s)",
}


def run_all(config):
    from asct_jax.rl.host_trainer import train_host

    results = {}
    for method in config.table.methods:
        results[method] = []
        for seed in config.table.seeds:
            c = apply_overrides(config, {"method": method, "seed": seed})
            c.train.run = f"{method}_s{seed}"
            done = os.path.join(c.train.results_dir, c.train.experiment, c.train.run,
                                "summary.json")
            if os.path.exists(done):
                with open(done) as f:
                    summary = json.load(f)
            else:
                summary = train_host(c)
                atomic_write_json(done, summary)
            print(f"{method} seed {seed}: held-out success {summary['initial/env/success']:.3f}"
                  f" -> {summary['final/env/success']:.3f}, score "
                  f"{summary['initial/env/score']:.3f} -> {summary['final/env/score']:.3f} "
                  f"({summary['wall_clock_s']:.0f} s)", flush=True)
            results[method].append(summary)
    return results


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
