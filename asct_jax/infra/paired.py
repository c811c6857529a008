"""Paired comparisons over seeds: the mean difference, its 95 % interval and a verdict.

Two methods trained on the same seeds and evaluated on the same held-out tasks give one
difference per seed, d_i = x_i - y_i (x: the method, y: the one it is compared with).

  mean   d_bar = (1 / n) sum_i d_i
  SD     s = sqrt(sum_i (d_i - d_bar)^2 / (n - 1))               (sample SD, n >= 2)
  t      d_bar +- t_{1 - alpha / 2, n - 1} s / sqrt(n)
  boot   the percentile interval of the mean over resamples of the n differences with
         replacement (scipy.stats.bootstrap; reported where n < 10, beside the t one)

Verdict, on the side of the claim (the sign the paper's gap has, or a sign given where
the paper states a direction without a number, else +): "shown" when the t interval lies
on that side of 0, "refuted" when on the other, else "inconclusive". For a claim of a
positive difference: shown above 0, refuted below. Where every seed's difference is the
same number (SD 0: a tie of a discrete metric, e.g. a success rate over a few held-out
episodes, on few seeds, or identical runs) the interval has width 0 by chance, not by
evidence: no verdict ("inconclusive").
`seeds_needed` is the smallest n whose t half-width at the measured SD is at most the
paper's gap |g|: t_{1 - alpha / 2, n - 1} s / sqrt(n) <= |g| (None without a
gap, and where the SD is 0: the seeds did not vary, so their count cannot be planned from
them). Without a paper gap, an inconclusive row of `comparison_rows` gives instead the n
whose half-width is its own measured |d_bar| (marked so).

    compare([0.61, 0.62, 0.60], [0.59, 0.60, 0.60], gap=0.025)

A table's pre-registered comparisons (`Comparison`: method, baseline, the paper's gap) are
rendered by `comparison_rows` from each method's value per seed, paired over the seeds both
methods ran.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np
from scipy import stats

VERDICTS = ("shown", "refuted", "inconclusive")
BOOTSTRAP_BELOW = 10      # the bootstrap interval is reported where n < this
BOOTSTRAP_RESAMPLES = 10_000
MAX_SEEDS = 100_000       # seeds_needed is capped here (a gap far below the noise)


def t_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """t_{1 - alpha / 2, n - 1} sd / sqrt(n) (alpha = 1 - confidence); n >= 2."""
    if n < 2:
        raise ValueError(f"n must be at least 2 for a t interval, got {n}")
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))


def seeds_needed(sd: float, gap: float, confidence: float = 0.95) -> int:
    """The smallest n >= 2 with t_half_width(sd, n) <= |gap| (MAX_SEEDS if none below)."""
    if gap == 0:
        raise ValueError("gap must be non-zero")
    if t_half_width(sd, MAX_SEEDS, confidence) > abs(gap):
        return MAX_SEEDS
    lo, hi = 1, MAX_SEEDS       # the half-width falls with n: bisect for the first n <= |gap|
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if t_half_width(sd, mid, confidence) <= abs(gap) else (mid, hi)
    return hi


def bootstrap_interval(diffs: np.ndarray, confidence: float = 0.95,
                       seed: int = 0) -> tuple:
    """The percentile bootstrap interval of the mean of diffs [n] (deterministic in seed;
    a zero-width interval when every difference is equal)."""
    diffs = np.asarray(diffs, np.float64)
    if np.all(diffs == diffs[0]):
        return float(diffs[0]), float(diffs[0])
    res = stats.bootstrap((diffs,), np.mean, confidence_level=confidence,
                          n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def claim_sign(gap: Optional[float] = None, claim: Optional[int] = None) -> int:
    """The claimed sign of the difference: `claim` (+1 / -1) if given, else the paper's
    gap's sign, else +1."""
    if claim is not None:
        if claim not in (1, -1):
            raise ValueError(f"claim must be +1 or -1, got {claim!r}")
        return claim
    return -1 if gap is not None and gap < 0 else 1


def compare(x: Sequence[float], y: Sequence[float], gap: Optional[float] = None,
            confidence: float = 0.95, claim: Optional[int] = None) -> dict:
    """The paired comparison of x [n] with y [n] (the same seeds, in the same order);
    the verdict on the side of claim_sign(gap, claim).

    Returns {n, mean, sd, t_interval (lo, hi), bootstrap_interval (lo, hi) or None
    (n >= BOOTSTRAP_BELOW), verdict (VERDICTS), gap, claim, seeds_needed}.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be paired 1-D sequences of one length, got shapes "
                         f"{x.shape} and {y.shape}")
    if x.shape[0] < 2:
        raise ValueError(f"a paired comparison needs at least 2 seeds, got {x.shape[0]}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = x - y                                              # d_i = x_i - y_i
    n, mean = d.shape[0], float(np.mean(d))                # d_bar
    sd = float(np.std(d, ddof=1))                          # s, the sample SD
    h = t_half_width(sd, n, confidence)                    # t_{1-a/2, n-1} s / sqrt(n)
    lo, hi = mean - h, mean + h
    side = claim_sign(gap, claim)                          # the claimed sign of d_bar
    near, far = sorted((side * lo, side * hi))             # the interval, claim side up
    verdict = ("inconclusive" if sd == 0 else          # a tie: no SD to build on
               "shown" if near > 0 else "refuted" if far < 0 else "inconclusive")
    return {
        "n": n, "mean": mean, "sd": sd, "t_interval": (lo, hi), "p": p_value(mean, sd, n),
        "bootstrap_interval": (bootstrap_interval(d, confidence)
                               if n < BOOTSTRAP_BELOW else None),
        "verdict": verdict, "gap": gap, "claim": side,
        "seeds_needed": None if gap is None or sd == 0 else seeds_needed(sd, gap, confidence),
    }


def p_value(mean: float, sd: float, n: int) -> float:
    """The two-sided paired t test's p = 2 P(T_{n-1} > |d_bar| / (s / sqrt(n))): below
    1 - confidence exactly where the t interval excludes 0. 1 where s = 0 (no verdict)."""
    if sd == 0:
        return 1.0
    return float(2.0 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list:
    """Holm's step-down correction over a page's m comparisons: with p sorted ascending,
    p_(1) <= ... <= p_(m), reject H_(i) while p_(i) <= alpha / (m - i + 1) (i = 1..m),
    stop at the first that is not. Returns, in the input order, whether each is rejected
    (its verdict kept; otherwise it becomes inconclusive). Controls the family-wise error
    rate at alpha."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    rejected = [False] * m
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (m - rank):                # alpha / (m - i + 1), 1-indexed i
            break
        rejected[i] = True
    return rejected


def holm_verdicts(results: Sequence[dict], alpha: float = 0.05,
                  family_size: Optional[int] = None) -> list:
    """The page's verdicts corrected by `holm` over every compare() result given: a
    shown / refuted verdict stays where its p is rejected, else "inconclusive".

    family_size: the page's pre-registered number of comparisons when only some have run
    (None: the results given); each one not yet run counts with p = 1, so no verdict is
    kept that the full family could take back for want of them."""
    m = len(results) if family_size is None else int(family_size)
    if m < len(results):
        raise ValueError(f"family_size {m} < the {len(results)} comparisons given")
    keep = holm([r["p"] for r in results] + [1.0] * (m - len(results)), alpha)
    return [r["verdict"] if k else "inconclusive" for r, k in zip(results, keep)]


def describe(c: dict, digits: int = 4) -> str:
    """One line: mean [t lo, hi] (bootstrap [lo, hi]) n, verdict (+ seeds for the gap)."""
    f = lambda v: f"{v:+.{digits}f}"  # noqa: E731
    s = f"{f(c['mean'])} [{f(c['t_interval'][0])}, {f(c['t_interval'][1])}]"
    if c["bootstrap_interval"] is not None:
        b = c["bootstrap_interval"]
        s += f" (bootstrap [{f(b[0])}, {f(b[1])}])"
    s += f", n = {c['n']}: {c['verdict']}"
    if c["verdict"] == "inconclusive" and c["seeds_needed"] is not None:
        s += f" (about {c['seeds_needed']} seeds for a half-width of {abs(c['gap']):.4g})"
    return s


class Comparison(NamedTuple):
    """A pre-registered comparison: `method` minus `baseline` on the table's metric;
    `gap`, the paper's difference (None where the paper gives none); `claim`, the sign
    the paper claims where it gives no gap (None: the gap's sign, else +1)."""

    method: str
    baseline: str
    gap: Optional[float] = None
    claim: Optional[int] = None


COLUMNS = ("comparison", "paper gap", "mean difference", "95 % t interval",
           "bootstrap interval", "n", "verdict", "seeds for the paper's gap")


def _seeds_cell(r: dict) -> str:
    """The seeds column of a compare() result: the seeds for the paper's gap; "- (SD 0)"
    where a non-zero gap or difference cannot be planned from seeds that did not vary;
    without a gap, an inconclusive non-zero difference's seeds for its own size; else "-"."""
    if r["seeds_needed"]:
        return str(r["seeds_needed"])
    if r["sd"] == 0 and (r["gap"] is not None or r["mean"] != 0):
        return "- (SD 0)"
    if r["verdict"] == "inconclusive" and r["mean"] != 0:
        return f"{seeds_needed(r['sd'], r['mean'])} (no paper gap: for its own size)"
    return "-"


def comparison_rows(values: Mapping[str, Mapping[int, float]],
                    comparisons: Sequence[Comparison], digits: int = 4) -> list:
    """One row (a dict of COLUMNS) per comparison, paired over the seeds both methods
    ran: values {method: {seed: value}}. A comparison with a missing method, or fewer
    than 2 seeds in common, is left out."""
    f = lambda v: f"{v:+.{digits}f}"  # noqa: E731
    rows = []
    for c in (Comparison(*c) for c in comparisons):
        x, y = values.get(c.method), values.get(c.baseline)
        common = [s for s in (x or {}) if s in (y or {})]
        if len(common) < 2:
            continue
        r = compare([x[s] for s in common], [y[s] for s in common], c.gap, claim=c.claim)
        boot = r["bootstrap_interval"]
        rows.append({
            "comparison": f"{c.method} - {c.baseline}",
            "paper gap": f(c.gap) if c.gap is not None else
            "- (claim < 0)" if r["claim"] < 0 else "-",
            "mean difference": f(r["mean"]),
            "95 % t interval": f"[{f(r['t_interval'][0])}, {f(r['t_interval'][1])}]",
            "bootstrap interval": "-" if boot is None else f"[{f(boot[0])}, {f(boot[1])}]",
            "n": r["n"], "verdict": r["verdict"],
            "seeds for the paper's gap": _seeds_cell(r),
        })
    return rows
