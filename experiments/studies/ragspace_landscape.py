"""The workflow landscape of `ragspace` (an analogue of RAGSpace on HotpotQA-like questions).

Every question of a split under every one of the 720 complete workflows (one jit:
jax.vmap over questions and workflows of index-level transitions), plus the scripted
policies: Base (the default workflow), the best fixed workflow (highest mean U), the
expert adaptive rule (observation only) and the per-question oracle (best of the 720 per
question). Mean U / F1 / execution words / auxiliary tokens / success, overall and per
difficulty. Writes results/ragspace_landscape.json atomically and prints a table.

    python -m experiments.studies.ragspace_landscape [--config.split=test] \
        [--config.dataset=hotpot] [--config.all]
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs import make
from asct_jax.envs import ragspace as rs
from asct_jax.infra import config_cli

CONFIG = "experiments/configs/studies/ragspace_landscape.py"
METRICS = ("utility", "f1", "exec_words", "aux_tokens", "success")
DIFFICULTY = ("easy", "medium", "hard")


def workflow_name(actions) -> str:
    """'original / bge_m3 / relevance / 6 / continue / stop / keep / top4' of [9] slots."""
    names, stage = [], rs.QUERY
    labels = [list(st) for st in rs.LABELS]
    labels[rs.RETRIEVER].append((rs.PROBE_LABEL, ""))
    for k in (int(a) for a in actions if a >= 0):
        names.append(labels[stage][k][0])
        stage = {rs.WIDTH: rs.CONTROL,
                 rs.CONTROL: rs.CONTROL if k == 1 else rs.RERANK}.get(stage, stage + 1)
    return " / ".join(names)


def landscape(dataset: str = "hotpot", split: str = "test", **overrides) -> Dict:
    """Grid and policy results of one dataset and split (see the module docstring)."""
    env, params = make("ragspace", dataset=dataset, split=split, **overrides)
    qids = jnp.arange(*params.split_range(), dtype=jnp.int32)          # [Q]
    flows = jnp.asarray(rs.workflow_actions(params.num_retrievers))    # [W, 9]

    @jax.jit
    def run(qids, flows):
        grid = jax.vmap(jax.vmap(lambda q, a: rs.run_workflow(env, params, q, a),
                                 (None, 0)), (0, None))(qids, flows)            # [Q, W]
        pols = {n: jax.vmap(lambda q, p=p: rs.run_policy(env, params, q, p))(qids)
                for n, p in (("base", rs.base_policy), ("expert", rs.expert_policy))}
        return grid, pols

    t0 = time.perf_counter()
    grid, pols = jax.device_get(run(qids, flows))
    seconds = time.perf_counter() - t0
    U = grid["utility"]
    best = int(np.argmax(U.mean(0)))                  # the best fixed workflow, by mean U
    oracle = np.argmax(U, axis=1)                     # [Q] per-question best workflow
    rows_q = np.arange(U.shape[0])
    per_q = {"base": pols["base"], "best_fixed": {k: v[:, best] for k, v in grid.items()},
             "expert": pols["expert"], "oracle": {k: v[rows_q, oracle] for k, v in grid.items()}}
    diff = np.asarray(grid["difficulty"][:, 0]).astype(int)
    rows = {}
    for name, d in per_q.items():
        row = {m: float(np.mean(d[m])) for m in METRICS}
        row["utility_by_difficulty"] = {DIFFICULTY[k]: float(np.mean(d["utility"][diff == k]))
                                        for k in range(3) if np.any(diff == k)}
        rows[name] = row
    rows["best_fixed"]["workflow"] = workflow_name(np.asarray(flows[best]))
    rows["base"]["workflow"] = workflow_name(rs.BASE_WORKFLOW)
    fixed_u = U.mean(0)
    return {"dataset": dataset, "split": split, "questions": int(U.shape[0]),
            "workflows": int(U.shape[1]), "seconds": seconds, "rows": rows,
            "fixed_utility_quantiles": {q: float(np.quantile(fixed_u, float(q)))
                                        for q in ("0.0", "0.5", "0.9", "1.0")},
            "difficulty_mix": [float(np.mean(diff == k)) for k in range(3)],
            "mean_aux_tokens_per_workflow": float(np.mean(grid["aux_tokens"]))}


def table(results) -> str:
    head = ("| dataset | policy | U | F1 | words | aux tokens | success | U easy / medium / "
            "hard |")
    lines = [head, "|" + "---|" * 8]
    for r in results:
        for name, row in r["rows"].items():
            by = " / ".join(f"{v:.3f}" for v in row["utility_by_difficulty"].values())
            lines.append(f"| {r['dataset']} | {name} | {row['utility']:.3f} | {row['f1']:.3f} "
                         f"| {row['exec_words']:.0f} | {row['aux_tokens']:.0f} "
                         f"| {row['success']:.3f} | {by} |")
    return "\n".join(lines)


def write_json(path: str, obj) -> None:
    """Atomic write: a temporary file in the same directory, then os.replace."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def main(args):
    """The landscape of `args` (experiments/configs/studies/ragspace_landscape.py)."""
    datasets = rs.DATASETS if args.all else (args.dataset,)
    results = [landscape(d, args.split) for d in datasets]
    text = table(results)
    print(text)
    for r in results:
        b = r["rows"]["best_fixed"]
        print(f"{r['dataset']}: best fixed = {b['workflow']}; base = "
              f"{r['rows']['base']['workflow']}; {r['seconds']:.1f} s")
    meta = {"jax": jax.__version__, "backend": jax.default_backend(),
            "note": "ragspace is an analogue of RAGSpace / HotpotQA, not the benchmark"}
    write_json(args.out, {"meta": meta, "results": results, "markdown": text})
    print(f"saved {args.out}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
