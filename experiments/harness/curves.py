"""Held-out curves of a table's runs: the mean over seeds per method with its 95 % t band,
one PNG per table / environment, and whether the best method's curve has flattened
(asct_jax.infra.curves: mean_band, plateau).

    python -m experiments.harness.curves --config.dir=results/factor_table_quick_warm \\
        --config.metric=eval/env/success --config.prefix=shop_
    python -m experiments.harness.curves --config.dir=results/factor_table_quick_warm  # per env

The options are the fields of experiments/configs/harness/curves.py.

Reads results/<experiment>/<run>/metrics.jsonl (the `eval/<metric>` records: step 0 and
every train.eval_every steps, and the last step). A run is <group>_s<seed>; its method is
the group without the prefix (prefix), or without "<env>_" (its config.json's env.name)
when no prefix is given, so variants (factor_no_hta) are methods of their own. A method's
mean curve is over the steps every one of its seeds evaluated. The best method has the
highest mean at its last step; its plateau is the OLS slope of the last `last_fraction`
of its mean curve with a 95 % t interval.

Writes <dir>/curves/<table>_<metric>.png and .json (the curves and the verdict), where
<table> is the prefix without its trailing "_" or the env name.
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np
from matplotlib.figure import Figure   # no pyplot: the figure draws on the Agg canvas

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.curves import Plateau, mean_band, plateau
from asct_jax.infra.run_logger import atomic_savefig, atomic_write_json, read_jsonl

CONFIG = "experiments/configs/harness/curves.py"
RUN_NAME = re.compile(r"^(?P<group>.+)_s(?P<seed>\d+)$")
Curve = Tuple[np.ndarray, np.ndarray]          # (steps [N], values [N]) of one seed


class MeanCurve(NamedTuple):
    """A method's curve over its seeds: steps [N], mean / lo / hi [N], seeds n."""

    steps: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    seeds: int


def _env_name(run_dir: str) -> str:
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            return str(json.load(f).get("env", {}).get("name", "") or "runs")
    except (OSError, ValueError):
        return "runs"


def load_curves(directory: str, metric: str, prefix: str = ""
                ) -> Dict[str, Dict[str, Dict[int, Curve]]]:
    """{table: {method: {seed: (steps, values)}}} of the runs under `directory` whose names
    start with `prefix` and whose metrics.jsonl logs `metric` (table: the prefix, else the
    run's env name)."""
    out: Dict[str, Dict[str, Dict[int, Curve]]] = {}
    for name in sorted(os.listdir(directory)):
        run_dir = os.path.join(directory, name)
        match = RUN_NAME.match(name)
        if not (match and name.startswith(prefix) and os.path.isdir(run_dir)):
            continue
        records = [r for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
                   if r.get(metric) is not None]
        if not records:
            continue
        group, seed = match["group"], int(match["seed"])
        if prefix:
            table, method = prefix.rstrip("_") or prefix, group[len(prefix):]
        else:
            table = _env_name(run_dir)
            method = group[len(table) + 1:] if group.startswith(table + "_") else group
        last = {int(r["step"]): float(r[metric]) for r in records}   # a resumed step: last
        steps = np.asarray(sorted(last), np.int64)
        out.setdefault(table, {}).setdefault(method or group, {})[seed] = (
            steps, np.asarray([last[s] for s in steps.tolist()], np.float64))
    return out


def mean_curves(runs: Dict[str, Dict[int, Curve]], confidence: float = 0.95
                ) -> Dict[str, MeanCurve]:
    """{method: MeanCurve} over each method's seeds, on the steps all of them logged."""
    out = {}
    for method, seeds in sorted(runs.items()):
        common = sorted(set.intersection(*[set(s.tolist()) for s, _ in seeds.values()]))
        if not common:
            continue
        values = np.stack([v[np.searchsorted(s, common)] for s, v in seeds.values()])
        mean, lo, hi = mean_band(values, confidence)
        out[method] = MeanCurve(np.asarray(common, np.int64), mean, lo, hi, len(seeds))
    return out


def best_plateau(curves: Dict[str, MeanCurve], last_fraction: float = 0.25
                 ) -> Tuple[Optional[str], Optional[Plateau], str]:
    """(best method: highest mean at its last step, its plateau or None, a note: why
    there is none)."""
    if not curves:
        return None, None, "no curves"
    best = max(curves, key=lambda m: curves[m].mean[-1])
    c = curves[best]
    try:
        return best, plateau(c.steps, c.mean, last_fraction), ""
    except ValueError as e:
        return best, None, str(e)


def curve_report(directory: str, metric: str, prefix: str = "",
                 last_fraction: float = 0.25) -> Dict[str, dict]:
    """{table: {"curves": {method: MeanCurve}, "best": method, "plateau": Plateau or None,
    "note": str}} of the runs under `directory` (load_curves, mean_curves, best_plateau)."""
    out = {}
    for table, runs in load_curves(directory, metric, prefix).items():
        curves = mean_curves(runs)
        best, p, note = best_plateau(curves, last_fraction)
        out[table] = {"curves": curves, "best": best, "plateau": p, "note": note}
    return out


def plot_table(curves: Dict[str, MeanCurve], metric: str, path: str, title: str) -> str:
    """One PNG: each method's mean curve (line) and 95 % t band (shaded) against step."""
    fig = Figure(figsize=(6, 3.8))
    ax = fig.add_subplot()
    for i, (method, c) in enumerate(curves.items()):   # past 10 lines: another line style
        line, = ax.plot(c.steps, c.mean, lw=1.5, marker=".", ls=("-", "--", ":")[i // 10 % 3],
                        label=f"{method} (n={c.seeds})")
        ax.fill_between(c.steps, c.lo, c.hi, color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize=7, loc="best")
    return atomic_savefig(fig, path)


def _verdict(entry: dict) -> str:
    p = entry["plateau"]
    if p is None:
        return f"best {entry['best']}: no plateau verdict ({entry['note']})"
    state = "flat (interval covers 0)" if p.flat else "still moving"
    return (f"best {entry['best']}: slope {p.slope:+.3g}/step, 95% [{p.lo:+.3g}, "
            f"{p.hi:+.3g}] over {p.points} points from step {p.from_step:g}: {state}")


def write_curves(directory: str, metric: str, prefix: str = "", last_fraction: float = 0.25,
                 out_dir: Optional[str] = None) -> Dict[str, dict]:
    """curve_report, plus <out_dir>/<table>_<metric>.png and .json per table (out_dir:
    <directory>/curves); returns the report with each table's "png" path added."""
    out_dir = out_dir or os.path.join(directory, "curves")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", metric)
    report = curve_report(directory, metric, prefix, last_fraction)
    for table, entry in report.items():
        base = os.path.join(out_dir, f"{table}_{safe}")
        entry["png"] = plot_table(entry["curves"], metric, base + ".png",
                                  f"{os.path.basename(os.path.normpath(directory))}: {table}")
        p = entry["plateau"]
        atomic_write_json(base + ".json", {
            "metric": metric, "last_fraction": last_fraction, "best": entry["best"],
            "plateau": None if p is None else p._asdict(), "note": entry["note"],
            "curves": {m: {"steps": c.steps.tolist(), "mean": c.mean.tolist(),
                           "lo": c.lo.tolist(), "hi": c.hi.tolist(), "seeds": c.seeds}
                       for m, c in entry["curves"].items()}})
    return report


def main(args) -> None:
    """Writes the curves of `args` (experiments/configs/harness/curves.py)."""
    if not args.dir:
        raise ConfigError("dir", "missing", "results/<experiment>")
    report = write_curves(args.dir, args.metric, args.prefix, args.last_fraction,
                          args.out or None)
    if not report:
        raise SystemExit(f"no run under {args.dir} logs {args.metric!r}"
                         + (f" with prefix {args.prefix!r}" if args.prefix else ""))
    for table, entry in report.items():
        print(f"{table}: {entry['png']}\n  {_verdict(entry)}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
