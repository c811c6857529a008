"""Does each method train under its authors' protocol? One tuning-seed run per method.

    python -m experiments.checks.protocol_check --config.table=factor  # GRPO, SERL, FACTOR, GiGPO
    python -m experiments.checks.protocol_check --config.table=asct    # PPO, VinePPO, AgentUCT
    python -m experiments.checks.protocol_check --config.table=factor \
        --config.lr_sweep=3e-4,1e-3,3e-3

Each run is the table's quick config (experiments/configs/factor_table.py:quick,
asct_ragspace.py:quick) at seed 7 (the tuning seed, never a reporting seed), with
ppo.term_grad_norms on for FACTOR. It writes results/protocol_check/<table>.{md,json}:
held-out score at step 0 and at the end, optimiser updates per step, the share of
tokens whose ratio was clipped, and for FACTOR the gradient norm of its KL term beside
the policy term's at steps 1, 5 and the last (the liveness the issue asks beside a table).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from experiments.configs import asct_ragspace, base, factor_table

CONFIG = "experiments/configs/checks/protocol_check.py"
TABLES = {
    "factor": (factor_table, ("grpo", "serl", "factor", "gigpo"), "eval/env/success"),
    "asct": (asct_ragspace, ("ppo_return", "vineppo", "asct_agentuct"), "eval/env/utility"),
}
TUNING_SEED = base.TUNING_SEED


def _records(path: str) -> List[Dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _config(table: str, method: str, results_dir: str, lr: float = 0.0):
    from experiments.harness.dotted import apply_overrides

    c = TABLES[table][0].get_config("quick")
    over = {"method": method, "seed": TUNING_SEED, "train.results_dir": results_dir,
            "train.experiment": f"protocol_check_{table}", "train.run": method,
            "train.progress": False, "train.batch_seeds": False}
    if method.startswith("factor"):
        over["ppo.term_grad_norms"] = True
    if lr:
        over.update({"ppo.lr": lr, "train.run": f"{method}_lr{lr:g}"})
    if table == "factor":
        over["env.name"] = "shop"
    return apply_overrides(c, over)


def summarise(run_dir: str, score: str) -> Dict[str, Any]:
    recs = _records(os.path.join(run_dir, "metrics.jsonl"))
    evals = [r for r in recs if score in r]
    steps = [r for r in recs if "train/updates" in r]
    out = {"score_start": evals[0][score], "score_end": evals[-1][score],
           "steps": len(steps),
           "updates_per_step": sum(r["train/updates"] for r in steps) / len(steps),
           "clip_frac": sum(r["train/clip_frac"] for r in steps) / len(steps)}
    for i in (1, 5, len(steps)):
        r = next((r for r in steps if r["step"] == i), None)
        if r is not None and "train/grad_norm/aux" in r:
            out[f"grad_policy@{i}"] = r["train/grad_norm/policy"]
            out[f"grad_kl@{i}"] = r["train/grad_norm/aux"]
    return out


def main(args):
    """Trains and summarises the runs of `args` (experiments/configs/checks/protocol_check.py)."""
    if args.table not in TABLES:
        raise ConfigError("table", f"{args.table!r} is not allowed" if args.table else "missing",
                          ", ".join(TABLES))
    from experiments.harness.runner import train_run

    _, methods, score = TABLES[args.table]
    lrs = [float(x) for x in args.lr_sweep.split(",") if x]
    runs = [(methods[0], lr) for lr in lrs] if lrs else [(m, 0.0) for m in methods]
    name = f"{args.table}_lr_sweep" if lrs else args.table
    rows = {}
    for method, lr in runs:
        c = _config(args.table, method, args.results_dir, lr)
        run_dir = os.path.join(args.results_dir, c.train.experiment, c.train.run)
        t0 = time.time()
        if not os.path.exists(os.path.join(run_dir, "summary.json")):
            train_run(c)
        rows[c.train.run] = dict(summarise(run_dir, score), lr=c.ppo.lr,
                                 wall_s=round(time.time() - t0, 1))
        print(c.train.run, rows[c.train.run], flush=True)
    out = os.path.join(args.results_dir, "protocol_check")
    atomic_write_json(os.path.join(out, f"{name}.json"), rows)
    keys = sorted({k for r in rows.values() for k in r})
    lines = ["| method | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [f"| {m} | " + " | ".join(f"{r[k]:.4g}" if isinstance(r.get(k), float) else
                                       str(r.get(k, "")) for k in keys) + " |"
              for m, r in rows.items()]
    atomic_write_text(os.path.join(out, f"{name}.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
