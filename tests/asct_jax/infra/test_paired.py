"""asct_jax.infra.paired: the paired difference, its t and bootstrap intervals, the verdict."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax.infra.paired import (Comparison, compare, comparison_rows, describe, seeds_needed,
                                   t_half_width)
from tests.helpers.tiers import examples

T_975_2 = 4.302653       # Student's t, 0.975 quantile, 2 degrees of freedom (tables)
T_975_16 = 2.119905
T_975_17 = 2.109816


def test_t_interval_on_a_hand_worked_case():
    # d = (1, 2, 3): mean 2, sample SD 1, half-width t_{0.975, 2} / sqrt(3) = 2.48414
    c = compare([1.5, 2.5, 3.5], [0.5, 0.5, 0.5])
    assert c["n"] == 3 and c["mean"] == pytest.approx(2.0) and c["sd"] == pytest.approx(1.0)
    h = T_975_2 / np.sqrt(3)
    assert c["t_interval"] == pytest.approx((2.0 - h, 2.0 + h), abs=1e-6)
    assert c["verdict"] == "inconclusive"          # -0.484 < 0 < 4.484


def test_bootstrap_interval_on_hand_worked_cases():
    # n = 2, d = (0, 2): resampled means 0, 1, 2 with probabilities 1/4, 1/2, 1/4, so the
    # 2.5 % and 97.5 % percentiles are 0 and 2.
    assert compare([0.0, 2.0], [0.0, 0.0])["bootstrap_interval"] == (0.0, 2.0)
    # n = 3, d = (1, 2, 3): the smallest resampled mean, 1, has probability 1/27 > 2.5 %.
    assert compare([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])["bootstrap_interval"] == (1.0, 3.0)
    # n >= 10: the t interval only
    assert compare(np.arange(10.0), np.zeros(10))["bootstrap_interval"] is None


def test_identical_runs_give_exactly_zero_with_zero_width():
    x = [0.61, 0.57, 0.66, 0.6]
    c = compare(x, x, gap=0.025)
    assert c["mean"] == 0.0 and c["sd"] == 0.0
    assert c["t_interval"] == (0.0, 0.0) and c["bootstrap_interval"] == (0.0, 0.0)
    assert c["verdict"] == "inconclusive" and c["seeds_needed"] is None   # SD 0: no plan


def test_a_tie_of_every_seed_gives_no_verdict():
    # Two seeds whose differences tie at +0.0469 (3 of 64 episodes): width 0 by chance.
    c = compare([0.6062, 0.6062], [0.5593, 0.5593])
    assert c["t_interval"][0] == c["t_interval"][1] == pytest.approx(0.0469)
    assert c["verdict"] == "inconclusive"


def test_verdicts_follow_the_interval():
    assert compare([0.7, 0.71, 0.72], [0.6, 0.6, 0.6])["verdict"] == "shown"
    assert compare([0.6, 0.6, 0.6], [0.7, 0.71, 0.72])["verdict"] == "refuted"


def test_verdicts_are_on_the_side_of_the_claim():
    """A claimed negative difference (the paper's gap < 0, or claim -1 without a gap): an
    interval below 0 shows it, one above refutes it; a bad claim is a one-line error."""
    below, above = ([0.6, 0.6, 0.6], [0.7, 0.71, 0.72]), ([0.7, 0.71, 0.72], [0.6] * 3)
    assert compare(*below, gap=-0.017)["verdict"] == "shown"
    assert compare(*above, gap=-0.017)["verdict"] == "refuted"
    assert compare(*below, claim=-1)["verdict"] == "shown"
    assert compare(*below, gap=-0.017)["claim"] == compare(*below, claim=-1)["claim"] == -1
    assert compare(*below, claim=1)["verdict"] == "refuted"
    with pytest.raises(ValueError, match="claim must be"):
        compare(*below, claim=0)
    rows = comparison_rows({"a": {1: 0.6, 2: 0.6, 3: 0.6}, "b": {1: 0.7, 2: 0.71, 3: 0.72}},
                           [Comparison("a", "b", None, -1), Comparison("a", "b")])
    assert [r["verdict"] for r in rows] == ["shown", "refuted"]
    assert [r["paper gap"] for r in rows] == ["- (claim < 0)", "-"]


def test_seeds_needed_is_the_first_n_whose_half_width_reaches_the_gap():
    # SD 1, gap 0.5: n = 17 gives 2.1199 / sqrt(17) = 0.514 > 0.5, n = 18 gives 0.497.
    assert T_975_16 / np.sqrt(17) > 0.5 >= T_975_17 / np.sqrt(18)
    assert seeds_needed(1.0, 0.5) == 18 == seeds_needed(1.0, -0.5)
    assert t_half_width(1.0, 18) == pytest.approx(T_975_17 / np.sqrt(18), abs=1e-6)
    assert compare([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], gap=0.5)["seeds_needed"] == 18
    assert "about 18 seeds" in describe(compare([1.0, 2.0, 3.0], [0.0] * 3, gap=0.5))



def test_without_a_paper_gap_an_inconclusive_row_gives_the_seeds_for_its_own_size():
    """d = (-0.5, 0.5, 1.5): mean 0.5, SD 1, inconclusive at n = 3; a half-width of 0.5
    needs 18 seeds (the case above). Identical runs give no count."""
    rows = comparison_rows({"a": {1: -0.5, 2: 0.5, 3: 1.5}, "b": {1: 0.0, 2: 0.0, 3: 0.0}},
                           [Comparison("a", "b")])
    assert rows[0]["verdict"] == "inconclusive"
    assert rows[0]["seeds for the paper's gap"] == "18 (no paper gap: for its own size)"
    same = comparison_rows({"a": {1: 0.5, 2: 0.5}, "b": {1: 0.5, 2: 0.5}}, [Comparison("a", "b")])
    assert same[0]["seeds for the paper's gap"] == "-"


@pytest.mark.parametrize("x, y, match", [
    ([0.5], [0.4], "at least 2 seeds"), ([0.5, 0.6], [0.4], "one length")])
def test_bad_input_gets_a_one_line_error(x, y, match):
    with pytest.raises(ValueError, match=match):
        compare(x, y)


floats = st.floats(-1.0, 1.0, allow_nan=False, width=32)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(floats, floats), min_size=2, max_size=12), floats)
def test_the_comparison_is_antisymmetric_and_shift_invariant(pairs, shift):
    x, y = np.array(pairs, np.float64).T
    c, r = compare(x, y), compare(y, x)
    assert r["mean"] == pytest.approx(-c["mean"], abs=1e-12)
    assert r["t_interval"] == pytest.approx((-c["t_interval"][1], -c["t_interval"][0]),
                                            abs=1e-9)
    assert {c["verdict"], r["verdict"]} in ({"inconclusive"}, {"shown", "refuted"})
    s = compare(x + shift, y + shift)
    assert s["mean"] == pytest.approx(c["mean"], abs=1e-9)
    lo, hi = c["t_interval"]
    assert lo <= c["mean"] <= hi
    if c["bootstrap_interval"] is not None:
        b_lo, b_hi = c["bootstrap_interval"]
        d = x - y
        assert d.min() - 1e-12 <= b_lo <= b_hi <= d.max() + 1e-12


def test_comparison_rows_pair_the_common_seeds_and_skip_missing_methods():
    from asct_jax.infra.paired import Comparison, comparison_rows
    values = {"a": {42: 0.7, 43: 0.71, 1: 0.72, 2: 0.9}, "b": {42: 0.6, 43: 0.6, 1: 0.6},
              "c": {42: 0.5}}
    rows = comparison_rows(values, [Comparison("a", "b", 0.05), ("a", "missing"),
                                    ("a", "c")])
    assert len(rows) == 1            # a - c: one seed in common, left out
    r = rows[0]                      # seed 2 is a's alone: not paired
    assert r["comparison"] == "a - b" and r["verdict"] == "shown" and r["n"] == 3
    assert r["mean difference"] == "+0.1100" and r["paper gap"] == "+0.0500"


def test_p_value_is_below_alpha_exactly_where_the_t_interval_excludes_zero():
    from asct_jax.infra.paired import compare

    for x, y in (([0.61, 0.62, 0.60, 0.63], [0.59, 0.60, 0.60, 0.58]),
                 ([0.7, 0.72, 0.71], [0.6, 0.61, 0.6]), ([0.5, 0.5], [0.5, 0.5])):
        r = compare(x, y)
        lo, hi = r["t_interval"]
        assert (r["p"] < 0.05) == (r["sd"] > 0 and (lo > 0 or hi < 0))
    assert compare([0.5, 0.5], [0.5, 0.5])["p"] == 1.0     # SD 0: no evidence


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    from asct_jax.infra.paired import holm, holm_verdicts

    # sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop (0.04 kept too)
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.2, 0.01]) == [False, True]            # 0.01 <= 0.025, 0.2 > 0.05
    assert holm([0.03, 0.03]) == [False, False]           # 0.03 > 0.025: none
    assert holm([]) == []
    rows = [{"p": 0.01, "verdict": "refuted"}, {"p": 0.03, "verdict": "shown"},
            {"p": 0.5, "verdict": "inconclusive"}]
    # 0.01 <= 0.05/3 kept; 0.03 > 0.05/2: shown becomes inconclusive
    assert holm_verdicts(rows) == ["refuted", "inconclusive", "inconclusive"]


@settings(deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), st.data())
def test_holm_over_a_partly_run_family_keeps_only_what_the_full_family_keeps(ps, data):
    """Rows not yet run at p = 1 (holm_verdicts' family_size): a verdict kept now is kept
    whatever p the remaining rows turn out to have."""
    from asct_jax.infra.paired import holm_verdicts

    k = data.draw(st.integers(1, len(ps)))
    rows = [{"p": p, "verdict": "shown"} for p in ps]
    partial = holm_verdicts(rows[:k], family_size=len(ps))
    full = holm_verdicts(rows)
    assert all(f == "shown" for p, f in zip(partial, full[:k]) if p == "shown")
