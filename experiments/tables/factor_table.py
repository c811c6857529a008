"""The FACTOR table (docs/methods.md, FACTOR) on the household / shop / science analogues
(experiments/configs/factor_generate.py: the same table with the generating actor).

Every method trains with the same steps and group size. grpo_extended is GRPO given
FACTOR's environment-call budget: its rollout.num_groups is scaled by the ratio of
FACTOR's measured environment calls (rollouts + value calibration) to GRPO's, so `factor`
and `grpo` run first. With table.warm_start every run starts from the environment's
shared warm start (experiments/harness/warm_start.py), made before the first run of that
env. Writes results/factor_table/<env>.{md,json}, a combined table and
FACTOR's environment calls and wall clock as ratios to GRPO's.
"""
import os

import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import markdown_table
from experiments.harness.runner import (from_warm_start, liveness_table, method_seeds,
                                        run_grid, write_comparisons, write_table)
from experiments.harness.tuning import tuned_overrides

METRICS = {"final/env/success": "success", "final/env/score": "score",
           "total/env_calls": "env calls", "wall_clock_s": "wall clock (s)"}
# A generating actor's (actor.chooser = "generate"), on the held-out episodes (sampled
# unless train.eval_greedy):
# the share of invalid steps and of actions written with two or more action tokens.
GEN_METRICS = {"final/gen/invalid": "invalid rate",
               "final/gen/multi_token_action": "actions of >= 2 tokens"}


# Per-step metrics beside the table (liveness.md, experiments.harness.runner.liveness_table):
# the advantage scale each method trains with, its budget, and a generating actor's
# format (invalid rate, share of actions written with >= 2 tokens) during training.
LIVENESS = {
    "credit/coef_abs_mean": "mean |C|",
    "train/grad_norm": "grad norm",
    "credit/env_calls": "credit env calls / step",
    "rollout/gen/invalid": "invalid (rollout)",
    "rollout/gen/multi_token_action": ">= 2 action tokens (rollout)",
    "rollout/gen/think_tokens": "reasoning tokens / turn",
    "rollout/gen/action_tokens": "action tokens / turn",
    "train/loss_nonact": "L_nonact",
    "train/teacher_kl": "teacher KL",
}
# Beside a searched row (asct_agentuct, asct_factor): the search's coverage and whether
# HTA + APM move any token's weight (mean |omega - 1| over actions of >= 2 tokens).
SEARCH_LIVENESS = {
    "credit/asct/root_visit_max_frac": "max root visit share",
    "credit/asct/fallback_frac": "fallback turns",
    "credit/factor/weight_spread": "mean |omega - 1|",
}


# The paper's Table 1 (success, mean of 3 seeds) on the benchmark each analogue stands for
# (household: ALFWorld, shop: WebShop, science: ScienceWorld; SERL: its reproduction).
PAPER_SUCCESS = {"household": {"factor": 0.920, "serl": 0.898, "grpo": 0.754},
                 "shop": {"factor": 0.824, "serl": 0.800, "grpo": 0.643},
                 "science": {"factor": 0.489, "serl": 0.447, "grpo": 0.355}}


def _mean(runs, key):
    return float(np.mean([r[key] for r in runs]))


def main(config):
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    methods = list(config.table.methods)
    seeds = max((method_seeds(config.table, m) for m in methods), key=len)
    if "grpo_extended" in methods and not {"grpo", "factor"} <= set(methods):
        # Checked before any run: its batch is FACTOR's environment calls over GRPO's.
        raise ConfigError("table.methods", f"{tuple(methods)} has grpo_extended without "
                          "grpo and factor, whose environment calls set its batch",
                          "grpo_extended with grpo and factor in the same table")
    order = [m for m in ("grpo", "factor") if m in methods] + \
            [m for m in methods if m not in ("grpo", "factor")]
    metrics = dict(METRICS, **(GEN_METRICS if config.actor.chooser == "generate" else {}))
    searched = any(m.startswith("asct_") for m in methods)
    live_cols = dict(LIVENESS, **(SEARCH_LIVENESS if searched else {}))
    ratios = []
    for env in config.table.envs:
        results = {}
        for m in order:
            overrides = from_warm_start(config, {"method": m, "env.name": env,
                                                 **tuned_overrides(config.table, env, m)})
            if m == "grpo_extended":
                scale = _mean(results["factor"], "total/env_calls") / \
                    _mean(results["grpo"], "total/env_calls")
                overrides["rollout.num_groups"] = max(
                    1, int(round(config.rollout.num_groups * scale)))
            name = f"{env}_{m}"
            results[m] = run_grid(config, [(name, overrides)],
                                  method_seeds(config.table, m), config.train.experiment)[name]
        print(f"\n## {env}\n")
        print(write_comparisons(results, config.table.comparisons, "final/env/success",
                                PAPER_SUCCESS.get(env, {}),
                                os.path.join(out_dir, f"{env}_comparisons")))
        print(write_table({m: results[m] for m in methods}, metrics,
                          os.path.join(out_dir, env)))
        live = liveness_table(out_dir, [f"{env}_{m}" for m in methods], seeds, live_cols)
        atomic_write_text(os.path.join(out_dir, f"{env}_liveness.md"), live)
        print(live)
        if {"grpo", "factor"} <= set(results):
            ratios.append({
                "env": env,
                "FACTOR / GRPO env calls": "{:.2f}x".format(
                    _mean(results["factor"], "total/env_calls")
                    / _mean(results["grpo"], "total/env_calls")),
                "FACTOR / GRPO wall clock": "{:.2f}x".format(
                    _mean(results["factor"], "wall_clock_s")
                    / _mean(results["grpo"], "wall_clock_s")),
            })
    if ratios:
        table = markdown_table(ratios, ["env", "FACTOR / GRPO env calls",
                                        "FACTOR / GRPO wall clock"])
        atomic_write_text(os.path.join(out_dir, "cost_ratios.md"), table + "\n")
        atomic_write_json(os.path.join(out_dir, "cost_ratios.json"), ratios)
        print(table)


if __name__ == "__main__":
    config_cli.run_main(main)
