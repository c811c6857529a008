"""The last screen of `python -m experiments.reproduce --config.quick`: what ran and at what scale,
each comparison of this smoke run beside the decision table's verdict for the same row
(docs/results/asct_decision.md, factor_decision.md: their archived comparisons under
docs/results/data/), whether this run's 95 % interval covers the decision table's mean,
and where the tables and plots are. About 30 lines of at most 100 columns.
"""
from __future__ import annotations

import json
import os
import re
import textwrap
from typing import Dict, List, Mapping, Optional, Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(_ROOT, "docs", "results")
# part: (label, the decision table's archived comparisons, its page, this run's comparisons
# file inside the experiment folder)
PARTS = {
    "asct": ("ASCT table, ragspace analogue, held-out utility",
             "data/asct_ragspace_quick_warm/comparisons.json", "asct_decision.md",
             "comparisons.json"),
    "factor": ("FACTOR table, shop analogue, held-out success",
               "data/factor_table_quick_warm/shop_comparisons.json", "factor_decision.md",
               "shop_comparisons.json"),
}
WIDTH = 100
_NUMBER = r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?"


def interval(text: str) -> Optional[tuple]:
    """(low, high) of a comparison's "95 % t interval" cell ("[-0.0100, +0.0200]"), or
    None ("-": fewer than two seeds)."""
    m = re.fullmatch(rf"\s*\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\]\s*", str(text))
    return (float(m.group(1)), float(m.group(2))) if m else None


def covers(interval_text: str, mean_text: str) -> str:
    """"yes" where the interval holds the mean (ends included), "no" where not, "-" where
    either is missing."""
    iv = interval(interval_text)
    try:
        mean = float(mean_text)
    except (TypeError, ValueError):
        return "-"
    if iv is None:
        return "-"
    return "yes" if iv[0] <= mean <= iv[1] else "no"


def _name(comparison: str) -> str:
    """"m - m (start)" -> "m vs its start"; a pair unchanged."""
    a, _, b = comparison.partition(" - ")
    return f"{a} vs its start" if b == f"{a} (start)" else comparison


def rows(run: Mapping, decision: Mapping) -> List[Dict[str, str]]:
    """This run's comparisons (a write_comparisons JSON: "rows", then "moved") beside the
    decision table's row of the same name: its mean difference, verdict and n, and whether
    this run's 95 % t interval covers that mean ("-" where the decision table has no such
    row)."""
    table = {r["comparison"]: r for k in ("rows", "moved") for r in decision.get(k, ())}
    out = []
    for kind in ("rows", "moved"):
        for r in run.get(kind, ()):
            d = table.get(r["comparison"], {})
            out.append({"comparison": _name(r["comparison"]),
                        "mean": r["mean difference"], "interval": r["95 % t interval"],
                        "verdict": r["verdict"], "n": str(r["n"]),
                        "decision mean": d.get("mean difference", "-"),
                        "decision verdict": d.get("verdict", "-"),
                        "decision n": str(d.get("n", "-")),
                        "covers": covers(r["95 % t interval"], d.get("mean difference"))})
    return out


def format_rows(table: Sequence[Mapping[str, str]]) -> List[str]:
    """Fixed-width lines of `rows` (a header, then a row each)."""
    w = max([len(r["comparison"]) for r in table] + [len("comparison")])
    line = (" {comparison:<{w}} {mean:>7} {interval:<18} {verdict:<13}| "
            "{dmean:>7} {dverdict:<12} {dn:>2} {covers}")
    out = [line.format(comparison="comparison", mean="mean", interval="95 % interval",
                       verdict="verdict", dmean="mean", dverdict="verdict", dn="n",
                       covers="covers", w=w)]
    for r in table:
        out.append(line.format(comparison=r["comparison"], mean=r["mean"],
                               interval=r["interval"], verdict=r["verdict"],
                               dmean=r["decision mean"], dverdict=r["decision verdict"],
                               dn=r["decision n"], covers=r["covers"], w=w).rstrip())
    return out


def scale(config) -> str:
    """One run's scale: methods, steps of groups x episodes, seeds, held-out episodes."""
    tc, ro = config.train, config.rollout
    seeds = sorted({s for s in tuple(config.table.seeds) + tuple(
        config.table.get("headline_seeds", ()))}, key=lambda s: (s not in (42, 43), s))
    return (f"{', '.join(config.table.methods)}: {tc.steps} steps of {ro.num_groups} x "
            f"{ro.group_size} episodes, seeds {', '.join(map(str, seeds))}, "
            f"{tc.eval_episodes} held-out episodes")


def _load(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def screen(configs: Mapping[str, object], results_dir: str, minutes: Optional[float],
           fig5_png: Optional[str] = None, docs: str = DOCS) -> str:
    """The final screen. configs: {part ("asct", "factor"): its table config (smoke)} of the
    parts that ran; results_dir: where they wrote; minutes: the whole run's wall clock."""
    took = "" if minutes is None else f", {minutes:.1f} min"
    out = [f"reproduce --config.quick: smoke scale, not the decision tables{took}"]
    for part, config in configs.items():
        label = PARTS[part][0].split(",")[0]
        env = config.env.name if part == "asct" else ", ".join(config.table.envs)
        out.extend(textwrap.wrap(f"- {label} ({env} analogue) {scale(config)}", WIDTH,
                                 subsequent_indent="  "))
    if fig5_png:
        out.append("- Figure 5: FACTOR's diagnostics of the FACTOR table's seed-42 run")
    out.append("covers: this run's 95 % interval holds the 10-seed decision table's mean "
               "(docs/results). At 2")
    out.append("seeds the intervals are wide: a sign opposite to the decision table's inside "
               "them is noise.")
    pages, decisions = [], []
    for part, config in configs.items():
        label, archived, page, name = PARTS[part]
        exp_dir = os.path.join(results_dir, config.train.experiment)
        run = _load(os.path.join(exp_dir, name))
        decision = _load(os.path.join(docs, archived)) or {}
        out.append("")
        out.append(f"{label}: this run (left) | decision table (right)")
        if run is None:
            out.append(f"  (no comparisons: {os.path.join(exp_dir, name)} is missing)")
        else:
            out.extend(format_rows(rows(run, decision)))
        pages.append(f"  {exp_dir}/  (*.md, *.png)")
        decisions.append(os.path.relpath(os.path.join(docs, page)))
    out.append("")
    out.append("Tables and plots of this run (each part's output: "
               f"{os.path.join(results_dir, 'reproduce_<part>.log')}):")
    out.extend(pages)
    if fig5_png:
        out.append(f"  {fig5_png}")
    out.extend(textwrap.wrap("The decision tables: " + ", ".join(decisions), WIDTH,
                             subsequent_indent="  "))
    return "\n".join(out)
