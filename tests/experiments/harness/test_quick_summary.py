"""The last screen of `experiments.reproduce --config.quick`
(experiments/harness/quick_summary.py): each comparison of the smoke run beside the decision
table's row, and whether its interval covers the decision table's mean."""
import json
import os

from experiments.configs import asct_ragspace, factor_table
from experiments.harness import quick_summary as q


def _row(comparison, mean, interval, verdict="inconclusive", n=2):
    return {"comparison": comparison, "mean difference": mean, "95 % t interval": interval,
            "verdict": verdict, "n": n}


def test_interval_and_covers_by_hand():
    assert q.interval("[-0.0300, +0.0250]") == (-0.03, 0.025)
    assert q.interval("-") is None
    # AgentUCT - PPO at smoke scale: -0.025 in [-0.30, +0.25]; the decision table's +0.045
    # lies inside, so the smoke run does not contradict it.
    assert q.covers("[-0.3000, +0.2500]", "+0.0450") == "yes"
    # [-0.0300, +0.0100] ends below +0.0450: not covered.
    assert q.covers("[-0.0300, +0.0100]", "+0.0450") == "no"
    assert q.covers("[+0.0450, +0.0500]", "+0.0450") == "yes"      # an end is inside
    assert q.covers("-", "+0.0450") == "-"                          # one seed: no interval
    assert q.covers("[-0.1000, +0.1000]", "-") == "-"               # no decision row
    assert q.covers("[-0.1000, +0.1000]", None) == "-"


def test_rows_pair_each_comparison_with_the_decision_tables_row():
    run = {"rows": [_row("asct_agentuct - ppo_return", "-0.0250", "[-0.3000, +0.2500]"),
                    _row("asct_agentuct - vineppo", "-0.0100", "[-0.0300, +0.0100]"),
                    _row("new - ppo_return", "+0.0100", "[-0.0100, +0.0300]")],
           "moved": [_row("vineppo - vineppo (start)", "+0.0300", "[+0.0200, +0.0400]",
                          "shown")]}
    decision = {"rows": [_row("asct_agentuct - ppo_return", "+0.0450", "[+0.04, +0.05]",
                              "shown", 10),
                         _row("asct_agentuct - vineppo", "+0.0195", "[+0.01, +0.03]",
                              "shown", 10)],
                "moved": [_row("vineppo - vineppo (start)", "+0.0255", "[+0.02, +0.03]",
                               "shown", 10)]}
    rows = q.rows(run, decision)
    assert [(r["comparison"], r["mean"], r["decision mean"], r["decision verdict"],
             r["decision n"], r["covers"]) for r in rows] == [
        ("asct_agentuct - ppo_return", "-0.0250", "+0.0450", "shown", "10", "yes"),
        ("asct_agentuct - vineppo", "-0.0100", "+0.0195", "shown", "10", "no"),
        ("new - ppo_return", "+0.0100", "-", "-", "-", "-"),
        ("vineppo vs its start", "+0.0300", "+0.0255", "shown", "10", "yes")]
    lines = q.format_rows(rows)
    assert len(lines) == 5 and all(len(l) <= q.WIDTH for l in lines)
    assert lines[1].split() == ["asct_agentuct", "-", "ppo_return", "-0.0250", "[-0.3000,",
                                "+0.2500]", "inconclusive", "|", "+0.0450", "shown", "10",
                                "yes"]


def test_screen_of_the_smoke_configs_fits_one_screen(tmp_path):
    configs = {"asct": asct_ragspace.get_config("smoke_warm"),
               "factor": factor_table.get_config("smoke_warm")}
    run_rows = {"asct": [_row("asct_agentuct - ppo_return", "-0.0250", "[-0.3000, +0.2500]"),
                         _row("asct_agentuct - vineppo", "-0.0100", "[-0.0300, +0.0100]")],
                "factor": [_row("factor - serl", "+0.0100", "[-0.0500, +0.0700]")]}
    for part, c in configs.items():
        d = tmp_path / c.train.experiment
        d.mkdir()
        (d / q.PARTS[part][3]).write_text(json.dumps({"rows": run_rows[part], "moved": []}))
    text = q.screen(configs, str(tmp_path), 2.9, fig5_png=str(tmp_path / "f.png"))
    lines = text.splitlines()
    assert lines[0] == "reproduce --config.quick: smoke scale, not the decision tables, 2.9 min"
    # (the paths aside: pytest's tmp_path is long)
    assert len(lines) <= 32 and all(len(l) <= q.WIDTH for l in lines
                                    if str(tmp_path) not in l), text
    assert "seeds 42, 43" in text and "ragspace analogue" in text and "shop analogue" in text
    # the decision pages' own numbers, from the archived comparisons
    agentuct = next(l for l in lines if l.strip().startswith("asct_agentuct - ppo_return"))
    assert agentuct.split()[-4:] == ["+0.0450", "shown", "10", "yes"]
    serl = next(l for l in lines if l.strip().startswith("factor - serl"))
    assert serl.split()[-4:] == ["-0.0187", "refuted", "10", "yes"]
    assert "docs/results/asct_decision.md" in text and "docs/results/factor_decision.md" in text
    assert os.path.join(str(tmp_path), "asct_ragspace_smoke_warm") in text


def test_a_missing_comparisons_file_is_said_not_raised(tmp_path):
    text = q.screen({"factor": factor_table.get_config("smoke_warm")}, str(tmp_path), None)
    assert "is missing" in text
