"""Figure 5's regime measures over several diagnostic samples of one run.

    python -m experiments.studies.fig5_samples \
        "--config.paths=results/factor_fig5/decision_end_shop_factor_s42*.json"

Each JSON is one `experiments.tables.factor_fig5` output on the same adopted run (`fig5.train_run`)
with another `fig5.seed` (the episodes its diagnostics sample). One sample of about 300
tokens moves the feedback control r by about 0.4 (docs/results/factor_decision.md); this
prints, per measure and phase (start = the warm start, end = the run's last checkpoint), the
mean over the samples and its 95 % t interval (asct_jax.infra.paired.t_half_width).

The "split" is the premise the feedback control tests: the teacher's mean Delta on progress
actions minus on no-progress actions, with the feedback, per sample.
"""
from __future__ import annotations

import glob
import json
from typing import Dict, List, Mapping, Sequence

import numpy as np

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.paired import t_half_width
from experiments.harness.dotted import flatten

CONFIG = "experiments/configs/studies/fig5_samples.py"
PHASES = (("start", "early"), ("end", "late"))
# (label, dotted path in the factor_fig5 JSON with {p} = early / late)
MEASURES = (
    ("feedback control r (target <= 0.3)", "feedback_control_{p}.pearson_r"),
    ("mean Delta, progress actions, with the feedback", "feedback_control_{p}.delta_progress_mean"),
    ("mean Delta, no-progress actions, with the feedback",
     "feedback_control_{p}.delta_no_progress_mean"),
    ("mean Delta, progress actions, without", "feedback_control_{p}.delta_progress_mean_no_feedback"),
    ("mean Delta, no-progress actions, without",
     "feedback_control_{p}.delta_no_progress_mean_no_feedback"),
    ("TAC vs Monte-Carlo credit r, all actions", "calibration_{p}.corr"),
    ("TAC vs Monte-Carlo credit r, interior actions", "calibration_{p}.corr_interior"),
    ("critic loss", "calibration_{p}.critic_loss"),
    ("tokens in the control", "feedback_control_{p}.tokens"),
)
SPLIT = "split: Delta progress - no-progress, with the feedback"


def _get(flat: Mapping, dotted: str, path: str) -> float:
    if dotted not in flat:
        raise KeyError(f"{path}: no field {dotted!r} (a factor_fig5 JSON with the "
                       "feedback control, warm_start.phase = 'feedback')")
    return float(flat[dotted])


def sample_values(docs: Sequence[Mapping], paths: Sequence[str]) -> Dict[str, Dict[str, List[float]]]:
    """{label: {"start" | "end": [value per sample]}}, SPLIT derived per sample."""
    flats = [flatten(d) for d in docs]
    out: Dict[str, Dict[str, List[float]]] = {}
    for label, dotted in MEASURES:
        out[label] = {phase: [_get(f, dotted.format(p=p), path) for f, path in zip(flats, paths)]
                      for phase, p in PHASES}
    prog = out["mean Delta, progress actions, with the feedback"]
    none = out["mean Delta, no-progress actions, with the feedback"]
    out[SPLIT] = {phase: [a - b for a, b in zip(prog[phase], none[phase])] for phase, _ in PHASES}
    return out


def summary(values: Sequence[float]) -> str:
    """'mean [lo, hi]' (95 % t interval over the samples); the single value where n = 1."""
    x = np.asarray(values, np.float64)
    if x.size == 1:
        return f"{x[0]:.2f}"
    h = t_half_width(float(x.std(ddof=1)), x.size)
    return f"{x.mean():.2f} [{x.mean() - h:.2f}, {x.mean() + h:.2f}]"


def table(values: Mapping[str, Mapping[str, Sequence[float]]], n: int) -> str:
    lines = [f"| measure (mean over {n} samples [95 % t interval]) | start | end |",
             "|---|---|---|"]
    for label, by_phase in values.items():
        lines.append(f"| {label} | {summary(by_phase['start'])} | {summary(by_phase['end'])} |")
    return "\n".join(lines)


def main(args) -> int:
    """Prints the table of `args.paths` (experiments/configs/studies/fig5_samples.py; a glob
    pattern stands for its matches, sorted)."""
    paths = [p for x in args.paths for p in sorted(glob.glob(x)) or [x]]
    if not paths:
        raise ConfigError("paths", "missing", "factor_fig5 JSONs of one run, one per fig5.seed")
    docs = []
    for path in paths:
        with open(path) as f:
            docs.append(json.load(f))
    runs = {d.get("train_run") for d in docs}
    if len(runs) != 1:
        raise SystemExit(f"paths: the samples must diagnose one run (fig5.train_run), got "
                         f"{sorted(map(str, runs))}")
    try:
        values = sample_values(docs, paths)
    except KeyError as e:
        raise SystemExit(e.args[0]) from None
    print(f"{runs.pop()}: {len(docs)} diagnostic samples")
    print(table(values, len(docs)))
    return 0


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
