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
Holm-corrected verdict. With `authors` (the same tables' comparisons under the authors'
protocol), each row also shows that protocol's verdict and its Holm verdict over its own
family; with `family_size` (the page's pre-registered number of rows), Holm runs over that
many, the rows not yet run counted with p = 1 (conservative while a family is partly run).
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


def page_rows(paths: Sequence[str], family_size: int = 0) -> List[Dict[str, Any]]:
    """Every row of every file, with its Holm verdict over all of them (or over the page's
    `family_size` pre-registered rows, those not yet run counted with p = 1)."""
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
    for r, v in zip(rows, paired.holm_verdicts(rows, family_size=family_size or None)):
        r["holm_verdict"] = v
    return rows


def protocol_key(row: Dict[str, Any]) -> str:
    """A row's table and comparison with the protocol suffix dropped
    ("factor_table_quick_warm_tuned/shop" and "factor_table_quick_warm/shop" meet)."""
    return f"{row['table'].replace('_tuned/', '/')} {row['comparison']}"


def with_authors(rows: List[Dict[str, Any]], authors: List[Dict[str, Any]]):
    """rows, each with the verdict ("authors' verdict") and Holm verdict ("authors' Holm")
    of the same row under the authors' protocol ("-" where it has none)."""
    by_key = {protocol_key(a): a for a in authors}
    out = []
    for r in rows:
        a = by_key.get(protocol_key(r))
        out.append(dict(r, authors_verdict=a["verdict"] if a else "-",
                        authors_holm=a["holm_verdict"] if a else "-"))
    return out


def _expand(files: Sequence[str]) -> List[str]:
    """Each path, or a glob pattern's matches (sorted)."""
    return [p for f in files for p in sorted(glob.glob(f)) or [f]]


def main(args):
    """Writes the page verdicts of `args` (experiments/configs/checks/page_verdicts.py)."""
    if not args.files:
        raise ConfigError("files", "missing", "a tuple of comparisons.json files")
    if not args.name:
        raise ConfigError("name", "missing", "results/page_verdicts/<name>.{md,json}")
    rows = page_rows(_expand(args.files), args.family_size)
    cells = [{"table": r["table"], "comparison": r["comparison"],
              "mean difference": f"{r['mean']:+.4f}", "p": f"{r['p']:.2g}",
              "verdict": r["verdict"], "Holm verdict": r["holm_verdict"]} for r in rows]
    columns = COLUMNS
    if args.authors:    # the same rows under the authors' protocol, their own family
        rows = with_authors(rows, page_rows(_expand(args.authors)))
        for c, r in zip(cells, rows):
            c.update({"authors' verdict": r["authors_verdict"],
                      "authors' Holm": r["authors_holm"]})
        columns = COLUMNS[:4] + ("authors' verdict", "authors' Holm") + COLUMNS[4:]
    table = markdown_table(cells, columns)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in paired.VERDICTS}
    kept = {v: sum(r["holm_verdict"] == v for r in rows) for v in paired.VERDICTS}
    unrun = args.family_size - len(rows)
    family = (f"the page's {args.family_size} pre-registered rows, the {unrun} not yet run "
              "at p = 1" if args.family_size else "all of them")
    head = (f"{len(rows)} comparisons; verdicts {counts}; after Holm's correction over "
            f"{family} (alpha 0.05) {kept}.")
    out = os.path.join(args.results_dir, "page_verdicts", args.name)
    atomic_write_text(out + ".md", head + "\n\n" + table + "\n")
    atomic_write_json(out + ".json", [{k: v for k, v in r.items()
                                       if k not in ("bootstrap_interval",)} for r in rows])
    print(head + "\n\n" + table)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
