"""Result tables over seeds (mean ± sample std) in Markdown, and a scatter with error bars.

    results = {"ppo_gae": {"utility": [0.58, 0.60, 0.59], "aux_tokens": [...]},
               "asct_agentuct": {...}}
    print(seed_table(results, ["utility", "aux_tokens"], fmt="{:.3f}"))

    | method        | utility         | aux_tokens |
    |---------------|-----------------|------------|
    | ppo_gae       | 0.590 ± 0.010   | ...        |

Std is the *sample* standard deviation (ddof = 1), as the papers report over seeds
42, 43, 1337. With one value the std is undefined: mean_std returns nan and the cell reads
"0.590 (n=1)"; with no values the cell reads "–". None entries (a missing seed) are
dropped; NaN entries are kept (a diverged seed makes the mean NaN, visibly).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure

from asct_jax.infra.run_logger import atomic_savefig

EMPTY = "–"


def _values(values: Sequence[Any]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None], dtype=np.float64)


def mean_std(values: Sequence[Any]) -> Tuple[float, float]:
    """(mean, sample std with ddof=1). n = 1: (x, nan); n = 0: (nan, nan)."""
    x = _values(values)
    if x.size == 0:
        return math.nan, math.nan
    std = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
    return float(np.mean(x)), std


def format_mean_std(values: Sequence[Any], fmt: str = "{:.3f}") -> str:
    """'mean ± std' (sample std); 'mean (n=1)' for one value; '–' for none."""
    x = _values(values)
    if x.size == 0:
        return EMPTY
    mean, std = mean_std(x)
    if x.size == 1:
        return f"{fmt.format(mean)} (n=1)"
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Any], columns: Sequence[str],
                   align: Optional[Sequence[str]] = None) -> str:
    """A GitHub Markdown table.

    Args:
      rows: sequences (one cell per column) or mappings (looked up by column name;
        a missing key gives '–').
      columns: header names.
      align: per column 'l', 'r' or 'c' (default: first column left, others right).
    Returns:
      The table, one line per row, columns padded to equal width.
    """
    cells = [[_cell(c) for c in columns]]
    for row in rows:
        if isinstance(row, Mapping):
            row = [row.get(c, EMPTY) for c in columns]
        if len(row) != len(columns):
            raise ValueError(f"row {row!r} has {len(row)} cells, expected {len(columns)}")
        cells.append([_cell(c) for c in row])
    widths = [max(3, *(len(r[i]) for r in cells)) for i in range(len(columns))]
    align = list(align) if align is not None else ["l"] + ["r"] * (len(columns) - 1)
    rule = {"l": lambda w: ":" + "-" * (w - 1), "r": lambda w: "-" * (w - 1) + ":",
            "c": lambda w: ":" + "-" * (w - 2) + ":"}
    pad = {"l": str.ljust, "r": str.rjust, "c": str.center}

    def line(parts):
        return "| " + " | ".join(parts) + " |"

    out = [line(pad["l"](h, w) for h, w in zip(cells[0], widths)),
           line(rule[a](w) for a, w in zip(align, widths))]
    out += [line(pad[a](c, w) for a, c, w in zip(align, r, widths)) for r in cells[1:]]
    return "\n".join(out)


def seed_table(results: Mapping[str, Mapping[str, Sequence[Any]]],
               metrics: Optional[Sequence[str]] = None, fmt: Any = "{:.3f}",
               method_header: str = "method") -> str:
    """Markdown table of `mean ± std` over seeds, one row per method.

    Args:
      results: {method: {metric: [one value per seed]}}.
      metrics: columns, in order (default: every metric, sorted).
      fmt: a format string for all metrics, or {metric: format string}.
    """
    if metrics is None:
        metrics = sorted({m for per in results.values() for m in per})
    fmts = fmt if isinstance(fmt, Mapping) else {m: fmt for m in metrics}
    rows = [[method] + [format_mean_std(per.get(m, ()), fmts.get(m, "{:.3f}"))
                        for m in metrics]
            for method, per in results.items()]
    return markdown_table(rows, [method_header, *metrics])


def scatter_with_errorbars(path: str, results: Mapping[str, Mapping[str, Sequence[Any]]],
                           x_metric: str, y_metric: str, *, xlabel: Optional[str] = None,
                           ylabel: Optional[str] = None, title: Optional[str] = None) -> str:
    """One point per method at (mean x, mean y) with ±1 sample-std bars on both axes.

    E.g. utility (y) vs auxiliary tokens (x). Saved atomically to `path` (PNG/PDF/SVG).
    Methods missing either metric are skipped; a single seed gets no bar.
    """
    fig = Figure(figsize=(5.5, 4))
    ax = fig.add_subplot()
    for method, per in results.items():
        if not len(_values(per.get(x_metric, ()))) or not len(_values(per.get(y_metric, ()))):
            continue
        (mx, sx), (my, sy) = mean_std(per[x_metric]), mean_std(per[y_metric])
        ax.errorbar(mx, my, xerr=None if math.isnan(sx) else sx,
                    yerr=None if math.isnan(sy) else sy, fmt="o", capsize=3, label=method)
        ax.annotate(method, (mx, my), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel(xlabel or x_metric)
    ax.set_ylabel(ylabel or y_metric)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return atomic_savefig(fig, path)
