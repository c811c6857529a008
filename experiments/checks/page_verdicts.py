"""Every comparison of a results page with its verdict corrected for the page's many
comparisons (Holm; asct_jax.infra.paired.holm).

    python -m experiments.checks.page_verdicts --config.name=factor_decision \
        "--config.files=('docs/results/data/factor_table_quick_warm/household_comparisons.json',
                         'docs/results/data/factor_table_quick_warm/shop_comparisons.json', ...)"

The options are the fields of experiments/configs/checks/page_verdicts.py; a file may be a
glob pattern (its matches, sorted).

Each file is a table's comparisons.json (experiments.harness.runner.write_comparisons: the values
per method and seed, and its rows). Every row is recomputed from the values (the same
paired t test, its two-sided p), then Holm's correction runs over all the rows of all the
files given: the page's family. Writes results/page_verdicts/<name>.{md,json} and prints
the table: per row its table, the comparison, the mean difference, p, the verdict and the
Holm-corrected verdict.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Sequence

from asct_jax.infra import config_cli, paired
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_json, atomic_write_text
from asct_jax.infra.tables import markdown_table

CONFIG = "experiments/configs/checks/page_verdicts.py"
COLUMNS = ("table", "comparison", "mean difference", "p", "verdict", "Holm verdict")


def _gap_and_claim(cell: str):
    """The paper's gap and claim of a stored row's "paper gap" cell."""
    if cell.startswith("- (claim < 0)"):
        return None, -1
    if cell.startswith("-") and cell.strip() == "-":
        return None, None
    return float(cell), None


def recompute(stored: Dict[str, Any]) -> List[Dict[str, Any]]:
    """compare() of each row of a stored comparisons.json, from its values."""
    out = []
    values = stored["values"]
    for row in stored["rows"]:
        method, baseline = row["comparison"].split(" - ")
        x, y = values[method], values[baseline]
        common = [s for s in x if s in y]
        gap, claim = _gap_and_claim(row["paper gap"])
        r = paired.compare([x[s] for s in common], [y[s] for s in common], gap, claim=claim)
        out.append(dict(r, comparison=row["comparison"], stored_verdict=row["verdict"]))
    return out


def page_rows(paths: Sequence[str]) -> List[Dict[str, Any]]:
    """Every row of every file, with its Holm verdict over all of them."""
    rows = []
    for path in paths:
        with open(path) as f:
            stored = json.load(f)
        label = os.path.join(os.path.basename(os.path.dirname(path)),
                             os.path.basename(path).replace("_comparisons.json", "")
                             .replace("comparisons.json", "").rstrip("_") or ".")
        for r in recompute(stored):
            if r["verdict"] != r["stored_verdict"]:
                raise ValueError(f"{path}: {r['comparison']} recomputes to {r['verdict']}, "
                                 f"stored {r['stored_verdict']}")
            rows.append(dict(r, table=label))
    for r, v in zip(rows, paired.holm_verdicts(rows)):
        r["holm_verdict"] = v
    return rows


def main(args):
    """Writes the page verdicts of `args` (experiments/configs/checks/page_verdicts.py)."""
    if not args.files:
        raise ConfigError("files", "missing", "a tuple of comparisons.json files")
    if not args.name:
        raise ConfigError("name", "missing", "results/page_verdicts/<name>.{md,json}")
    rows = page_rows([p for f in args.files for p in sorted(glob.glob(f)) or [f]])
    table = markdown_table([{
        "table": r["table"], "comparison": r["comparison"],
        "mean difference": f"{r['mean']:+.4f}", "p": f"{r['p']:.2g}",
        "verdict": r["verdict"], "Holm verdict": r["holm_verdict"]} for r in rows], COLUMNS)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in paired.VERDICTS}
    kept = {v: sum(r["holm_verdict"] == v for r in rows) for v in paired.VERDICTS}
    head = (f"{len(rows)} comparisons; verdicts {counts}; after Holm's correction over "
            f"all of them (alpha 0.05) {kept}.")
    out = os.path.join(args.results_dir, "page_verdicts", args.name)
    atomic_write_text(out + ".md", head + "\n\n" + table + "\n")
    atomic_write_json(out + ".json", [{k: v for k, v in r.items()
                                       if k not in ("bootstrap_interval",)} for r in rows])
    print(head + "\n\n" + table)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
