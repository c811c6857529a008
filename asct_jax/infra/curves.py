"""Held-out curves over seeds: the mean curve with its 95 % band, and whether it has
stopped moving (issue 49).

A method's eval curve is y_{s, j}: seed s's held-out metric at step x_j (logged at step 0
and every train.eval_every steps). Over its n seeds, at each step:

  mean   y_bar_j = (1 / n) sum_s y_{s, j}
  band   y_bar_j +- t_{1 - alpha / 2, n - 1} sd_j / sqrt(n)       (sd_j: sample SD; n >= 2)

Plateau: the OLS line y = a + b x through the points of the last `last_fraction` of the
curve's step range (x >= x_last - last_fraction (x_last - x_first)), m >= 3 of them:

  b      = S_xy / S_xx,  S_xx = sum (x - x_bar)^2,  S_xy = sum (x - x_bar)(y - y_bar)
  SE(b)  = sqrt(SSE / (m - 2) / S_xx),  SSE = sum (y - a - b x)^2
  CI     b +- t_{1 - alpha / 2, m - 2} SE(b)

"flat" when the interval covers 0: no trend left that the points can tell from noise
(a curve still rising has its interval above 0). A wide interval covers 0 too: with few
or noisy points "flat" means "no trend shown", so read it with its width. Steps are
training steps, so b is the change of the metric per step.

    p = plateau(range(0, 65, 5), curve)   # 13 points: the fit over steps 45, 50, 55, 60
    p.flat, p.slope, (p.lo, p.hi)
"""
from __future__ import annotations

from typing import NamedTuple, Sequence, Tuple

import numpy as np
from scipy import stats


class Plateau(NamedTuple):
    """The OLS slope of the curve's last part: slope b (metric per step), its interval
    [lo, hi], the m points fitted, the first step of the window, and `flat`: lo <= 0 <= hi."""

    slope: float
    lo: float
    hi: float
    points: int
    from_step: float
    flat: bool


def plateau(steps: Sequence[float], values: Sequence[float], last_fraction: float = 0.25,
            confidence: float = 0.95) -> Plateau:
    """Plateau of the curve values [N] at steps [N] (module docstring). Raises ValueError
    (one line) with fewer than 3 points in the window or a last_fraction outside (0, 1]."""
    if not 0.0 < last_fraction <= 1.0:
        raise ValueError(f"last_fraction: {last_fraction!r} is out of range; allowed: (0, 1]")
    x, y = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"steps {x.shape} and values {y.shape} must be one [N] curve")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    start = x[-1] - last_fraction * (x[-1] - x[0]) if x.size else 0.0
    keep = x >= start - 1e-9 * max(1.0, abs(start))
    x, y = x[keep], y[keep]
    m = int(x.size)
    if m < 3:
        raise ValueError(f"plateau: {m} points in the last {last_fraction:g} of the curve; "
                         "a slope interval needs 3 (evaluate more often: train.eval_every)")
    dx = x - x.mean()
    sxx = float(dx @ dx)                                   # S_xx
    if sxx == 0.0:
        raise ValueError("plateau: every point of the window is at one step")
    b = float(dx @ (y - y.mean())) / sxx                   # b = S_xy / S_xx
    a = y.mean() - b * x.mean()
    resid = y - a - b * x
    se = float(np.sqrt((resid @ resid) / (m - 2) / sxx))   # SE(b) = sqrt(SSE/(m-2)/S_xx)
    half = float(stats.t.ppf(0.5 + confidence / 2, m - 2)) * se
    lo, hi = b - half, b + half                            # b +- t_{m-2} SE(b)
    return Plateau(slope=b, lo=lo, hi=hi, points=m, from_step=float(x[0]),
                   flat=bool(lo <= 0.0 <= hi))


def mean_band(values: np.ndarray, confidence: float = 0.95
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """values [n seeds, N steps] -> (mean [N], lo [N], hi [N]): y_bar_j and its t band
    y_bar_j +- t_{n-1} sd_j / sqrt(n); with one seed the band is the mean itself."""
    v = np.asarray(values, np.float64)
    if v.ndim != 2 or v.shape[0] < 1:
        raise ValueError(f"values must be [seeds, steps] with a seed, got {v.shape}")
    mean = v.mean(axis=0)
    n = v.shape[0]
    if n < 2:
        return mean, mean.copy(), mean.copy()
    sd = v.std(axis=0, ddof=1)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / np.sqrt(n)   # t_half_width
    return mean, mean - half, mean + half
