"""Held-out curves (issue 49): the plateau slope and its interval on hand-worked curves,
the mean band (asct_jax.infra.curves; experiments.harness.curves on synthetic
metrics.jsonl files: tests/experiments/harness/test_curves.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from asct_jax.infra.curves import mean_band, plateau
from tests.helpers.tiers import examples

T975 = {1: 12.706204736174707, 2: 4.302652729749464}   # t_{0.975, df}


def test_a_line_has_its_slope_and_a_zero_width_interval_that_misses_0():
    x = np.arange(13) * 5                       # steps 0 .. 60; the last quarter: 45 .. 60
    p = plateau(x, 2.0 + 0.5 * x)
    assert (p.points, p.from_step, p.flat) == (4, 45.0, False)
    assert p.slope == pytest.approx(0.5) and p.lo == pytest.approx(0.5)
    assert p.hi == pytest.approx(0.5)


def test_three_points_by_hand():
    # x 0 1 2, y 0 2 1: S_xx = 2, S_xy = 1, b = 0.5, a = 0.5, residuals -0.5 1 -0.5,
    # SSE = 1.5, SE = sqrt(1.5 / 1 / 2), half = t_{.975,1} SE
    p = plateau([0, 1, 2], [0.0, 2.0, 1.0], last_fraction=1.0)
    half = T975[1] * np.sqrt(0.75)
    assert p.slope == pytest.approx(0.5)
    assert (p.lo, p.hi) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert p.flat and p.points == 3


def test_the_window_is_the_last_fraction_of_the_step_range_by_hand():
    # steps 0..8 given out of order; y(4..8) = 0 1 1 3 3
    x = [8, 0, 1, 2, 3, 4, 5, 6, 7]
    y = [3.0, -5, -4, -3, -2, 0.0, 1.0, 1.0, 3.0]
    # last half, x >= 4: x 4..8 / y 0 1 1 3 3: x_bar 6, S_xx 10, y_bar 1.6,
    # S_xy = (-2)(-1.6) + (-1)(-0.6) + 0 + (1)(1.4) + (2)(1.4) = 8, b = 0.8
    p = plateau(x, y, last_fraction=0.5)
    assert (p.points, p.from_step) == (5, 4.0)
    assert p.slope == pytest.approx(0.8)
    q = plateau(x, y, last_fraction=3 / 8)      # x >= 8 - 3 = 5: y 1 1 3 3
    # x_bar 6.5, S_xx 5, y_bar 2, S_xy = (-1.5)(-1) + (-.5)(-1) + (.5)(1) + (1.5)(1) = 4
    # b = 0.8, a = -3.2, fitted 0.8 1.6 2.4 3.2, residuals .2 -.6 .6 -.2, SSE = 0.8
    half = T975[2] * np.sqrt(0.8 / 2 / 5)
    assert q.points == 4 and q.slope == pytest.approx(0.8)
    assert (q.lo, q.hi) == (pytest.approx(0.8 - half), pytest.approx(0.8 + half))
    assert q.flat == (0.8 - half <= 0)


def test_a_constant_curve_is_flat_and_too_few_points_is_an_error():
    p = plateau([0, 10, 20, 30], [0.4] * 4, last_fraction=1.0)
    assert (p.slope, p.lo, p.hi, p.flat) == (0.0, 0.0, 0.0, True)
    with pytest.raises(ValueError, match="2 points"):
        plateau([0, 10, 20, 30, 40], [0.1, 0.2, 0.3, 0.4, 0.5])   # window 30, 40
    with pytest.raises(ValueError, match="last_fraction"):
        plateau([0, 1, 2], [0, 1, 2], last_fraction=0.0)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.integers(-100, 100), min_size=3, max_size=12),
       st.floats(-5, 5), st.floats(0.1, 4))
def test_the_slope_and_interval_are_scipys_and_move_with_the_values(ys, shift, scale):
    x = np.arange(len(ys)) * 3.0
    y = np.asarray(ys) / 100.0
    p = plateau(x, y, last_fraction=1.0)
    ref = stats.linregress(x, y)
    # scipy's stderr is nan for a constant y (r = 0 / 0); the slope's SE is then 0
    half = 0.0 if np.ptp(y) == 0 else stats.t.ppf(0.975, len(ys) - 2) * ref.stderr
    assert p.slope == pytest.approx(ref.slope, abs=1e-9)
    assert p.hi - p.lo == pytest.approx(2 * half, abs=1e-9)
    q = plateau(x, scale * y + shift, last_fraction=1.0)      # b(s y + c) = s b(y)
    assert q.slope == pytest.approx(scale * p.slope, abs=1e-9)
    assert q.hi - q.lo == pytest.approx(scale * (p.hi - p.lo), abs=1e-8)


def test_mean_band_by_hand():
    mean, lo, hi = mean_band(np.array([[1.0, 2.0], [3.0, 4.0]]))
    # n = 2: sd = sqrt(2), half = t_{.975,1} sqrt(2) / sqrt(2)
    np.testing.assert_allclose(mean, [2.0, 3.0])
    np.testing.assert_allclose(hi - mean, [T975[1]] * 2)
    np.testing.assert_allclose(mean - lo, [T975[1]] * 2)
    one = mean_band(np.array([[0.5, 0.7]]))
    np.testing.assert_allclose(np.stack(one), [[0.5, 0.7]] * 3)
