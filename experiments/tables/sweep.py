"""Tunes each method of a table on the tuning seed and validation episodes (issue 49).

    python -m experiments.tables.sweep --config experiments/configs/factor_table.py:quick_warm
    python -m experiments.tables.sweep --config experiments/configs/factor_table.py:quick_warm \
        --config.sweep.methods=grpo,factor --config.sweep.envs=shop
    python -m experiments.tables.sweep --config experiments/configs/asct_ragspace.py:quick_warm

Any table config and any registered method: the grid and the rules are in
experiments/harness/tuning.py (the learning rate over sweep.lr_factors x the table's rate,
then the method's teacher weight where it has one; score = the mean validation metric over
the last quarter of the run; every point at seed base.TUNING_SEED, sweep.steps steps, an
evaluation every sweep.eval_every on train.eval_split "validation"). Each point is a run
of experiments.harness.runner.run_grid in results/<sweep.experiment>/ (default
sweep_<the table's experiment>), so a finished point is reused and an interrupted sweep
picks up where it stopped (--config.train.resume=True resumes a point from its
checkpoints). Methods that take their parent's values (tuning.TUNED_FROM) are not swept.

Writes results/<sweep experiment>/<env>_<method>_tuning.{md,json} (the grid, each point's
validation score, the chosen values), <env>_tuning.json (every method's choice and the
run length of the best method's curve: tuning.run_length) and <env>_validation.png (one
panel per method, each point's curve; `replot` redraws it from an archived sweep).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text, read_jsonl
from asct_jax.infra.tables import markdown_table
from experiments.configs.base import TUNING_SEED
from experiments.harness import tuning
from experiments.harness.dotted import flatten
from experiments.harness.runner import from_warm_start, run_grid


def sweep_config(config):
    """The table's config for a sweep point: the tuning seed's run length, validation
    episodes, an evaluation every sweep.eval_every, one run per variant (no seed batch)."""
    from experiments.harness.dotted import apply_overrides

    sw = config.sweep
    return apply_overrides(config, {
        "train.steps": sw.steps, "train.eval_every": sw.eval_every,
        "train.eval_split": "validation",
        "train.checkpoint_every": min(config.train.checkpoint_every, sw.eval_every * 2),
    })


def _names(config) -> Tuple[List[str], List[str]]:
    sw, table = config.sweep, config.get("table", {})
    split = lambda names: [n for name in names for n in name.split(",") if n]  # noqa: E731
    methods = split(sw.methods) or list(table.get("methods", (config.method,)))
    envs = split(sw.envs) or list(table.get("envs", (config.env.name,)))
    from experiments.harness import registry
    for m in methods:
        registry.get(m)                                     # a one-line error if unknown
    for m in methods:
        if m in tuning.TUNED_FROM:
            raise ConfigError("sweep.methods", f"{m} takes {tuning.TUNED_FROM[m]}'s tuned "
                              "values; sweep that one", "methods without a parent")
    return methods, envs


def _point(config, experiment: str, env: str, method: str, over: Dict[str, Any]):
    """(name, validation curve, score) of one grid point, trained if not finished."""
    metric = f"eval/{config.sweep.metric}"
    name = tuning.point_name(env, method, over)
    options = tuning.tuned_options(config.table, method) if "table" in config else {}
    variant = from_warm_start(config, {"method": method, "env.name": env, **options, **over})
    run_grid(config, [(name, variant)], [TUNING_SEED], experiment)
    path = os.path.join(config.train.results_dir, experiment, f"{name}_s{TUNING_SEED}",
                        "metrics.jsonl")
    steps, values = tuning.curve_of(read_jsonl(path), metric)
    return name, (steps, values), tuning.score(steps, values)


def sweep_method(config, experiment: str, env: str, method: str) -> Dict[str, Any]:
    """Both stages for one (env, method); writes <env>_<method>_tuning.{md,json}."""
    out_dir = os.path.join(config.train.results_dir, experiment)
    lr_scale = _lr_scale(config, method)
    points: Dict[str, Tuple[Dict[str, Any], float]] = {}
    curves: Dict[str, Any] = {}
    grid = tuning.lr_grid(config.ppo.lr, config.sweep.lr_factors)
    for lr in grid:
        over = {"ppo.lr": lr}
        name, curve, s = _point(config, experiment, env, method, over)
        points[name], curves[name] = (over, s), curve
    best = tuning.choose(points)
    for _ in range(config.sweep.edge_extensions):   # a best rate at an edge: one further
        lr = tuning.beyond_edge(grid, points[best][0]["ppo.lr"])
        if lr is None:
            break
        grid.append(lr)
        over = {"ppo.lr": lr}
        name, curve, s = _point(config, experiment, env, method, over)
        points[name], curves[name] = (over, s), curve
        best = tuning.choose(points)
    stage_two = tuning.STAGE_TWO.get(method) if config.sweep.second_stage else None
    if stage_two is not None:
        field, values = stage_two
        stage1, current = dict(points[best][0]), flatten(config.to_dict()).get(field)
        second = {}
        for v in values:
            if v == current:       # the stage-1 point already ran at this value: reuse it
                second[best] = (dict(stage1, **{field: v}), points[best][1])
                continue
            over = dict(stage1, **{field: v})
            name, curve, s = _point(config, experiment, env, method, over)
            points[name], curves[name] = (over, s), curve
            second[name] = (over, s)
        best = tuning.choose(second)
        points[best] = second[best]             # the chosen point with every field it set
    rows = [tuning.table_row(n, o, s, curves[n][1][-1] if curves[n][1] else None, lr_scale)
            for n, (o, s) in points.items()]
    result = {"env": env, "method": method, "seed": TUNING_SEED,
              "metric": f"eval/{config.sweep.metric}", "split": "validation",
              "chosen": points[best][0], "chosen_point": best, "lr_scale": lr_scale,
              "points": {n: {"overrides": o, "score": s, "steps": curves[n][0],
                             "values": curves[n][1]} for n, (o, s) in points.items()}}
    stem = os.path.join(out_dir, f"{env}_{method}_tuning")
    cols = list(dict.fromkeys(k for r in rows for k in r))
    atomic_write_text(stem + ".md", markdown_table(rows, cols) + f"\n\nChosen: {best}\n")
    atomic_write_json(stem + ".json", result)
    return result


def _lr_scale(config, method: str) -> float:
    from experiments.harness import registry
    from experiments.harness.dotted import apply_overrides

    c = apply_overrides(config, {"method": method})
    return float(registry.check(c)[1].record["ppo"]["lr_scale"])


def main(config):
    config = sweep_config(config)
    sw = config.sweep
    experiment = sw.experiment or f"sweep_{config.train.experiment}"
    methods, envs = _names(config)
    out_dir = os.path.join(config.train.results_dir, experiment)
    for env in envs:
        results = {m: sweep_method(config, experiment, env, m) for m in methods}
        top = max(results.values(), key=lambda r: r["points"][r["chosen_point"]]["score"])
        p = top["points"][top["chosen_point"]]
        length, test = tuning.run_length(p["steps"], p["values"], sw.eval_every,
                                         sw.min_steps, sw.steps)
        summary = {"env": env, "chosen": {m: r["chosen"] for m, r in results.items()},
                   "scores": {m: r["points"][r["chosen_point"]]["score"]
                              for m, r in results.items()},
                   "best_method": top["method"], "run_length": length, "plateau": test}
        atomic_write_json(os.path.join(out_dir, f"{env}_tuning.json"), summary)
        _plot(out_dir, env, results, config.sweep.metric)
        print(f"{env}: chosen {summary['chosen']}; best {top['method']}; run length "
              f"{length} (slope over the last quarter {test})", flush=True)


def _plot(out_dir: str, env: str, results, metric: str) -> str:
    """<env>_validation.png: one panel per method, each grid point's validation curve
    coloured by its rate (darker: lower), the teacher-weight points dashed, the chosen
    point thick."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    from asct_jax.infra.run_logger import atomic_savefig

    fig = Figure(figsize=(4.2 * len(results), 3.6))
    axes = fig.subplots(1, len(results), sharey=True, squeeze=False)[0]
    for ax, (method, r) in zip(axes, results.items()):
        rates = sorted({pt["overrides"]["ppo.lr"] for pt in r["points"].values()})
        shade = {lr: colormaps["viridis"](i / max(1, len(rates) - 1) * 0.9)
                 for i, lr in enumerate(rates)}
        for name, pt in sorted(r["points"].items(),
                               key=lambda kv: (kv[1]["overrides"]["ppo.lr"], kv[0])):
            over = pt["overrides"]
            extra = ", ".join(f"{k.split('.')[-1]} {v:g}" for k, v in over.items()
                              if k != "ppo.lr")
            chosen = name == r["chosen_point"]
            stage_two = name != tuning.point_name(env, method, {"ppo.lr": over["ppo.lr"]})
            ax.plot(pt["steps"], np.asarray(pt["values"], np.float64), marker=".",
                    color=shade[over["ppo.lr"]], ls="--" if stage_two else "-",
                    lw=2.6 if chosen else 1.2,
                    label=f"{over['ppo.lr']:g}" + (f", {extra}" if extra else "")
                    + (" (chosen)" if chosen else ""))
        ax.set_title(f"{method}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", title="ppo.lr", title_fontsize=6)
    axes[0].set_ylabel(metric)
    fig.suptitle(f"{env}: validation {metric}, seed {TUNING_SEED}", fontsize=10)
    fig.tight_layout()
    return atomic_savefig(fig, os.path.join(out_dir, f"{env}_validation.png"))


def replot(directory: str, env: str, methods) -> str:
    """_plot from a sweep folder's <env>_<method>_tuning.json files (an archived sweep)."""
    results = {}
    for m in methods:
        with open(os.path.join(directory, f"{env}_{m}_tuning.json")) as f:
            results[m] = json.load(f)
    first = next(iter(results.values()))
    return _plot(directory, env, results, first["metric"])


if __name__ == "__main__":
    config_cli.run_main(main)
