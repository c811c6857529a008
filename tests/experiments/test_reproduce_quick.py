"""`python -m experiments.reproduce --config.quick`'s terminal: a line per part and per finished
run (no progress bars, each part's tables in results/reproduce_<part>.log), then the one
screen of experiments/harness/quick_summary.py. The parts are stand-ins here (no training)."""
import json
import os

import pytest

from experiments import reproduce
from experiments.configs import reproduce as reproduce_config
from experiments.harness import runner
from experiments.tables import asct_ragspace, factor_fig5, factor_table


def _config(**fields):
    config = reproduce_config.get_config()
    config.update(quick=True, **fields)
    return config


@pytest.fixture
def fake_parts(monkeypatch):
    seen = {}

    def part(name, comparisons):
        def run(config):
            seen[name] = config
            assert config.train.progress is False
            print("| a wide table |")                 # the part's own output: logged
            runner.STATUS(f"{config.train.experiment}/x_s42: held-out success 0.1 -> 0.2")
            if comparisons:
                d = os.path.join(config.train.results_dir, config.train.experiment)
                os.makedirs(d, exist_ok=True)
                row = {"comparison": "factor - serl", "mean difference": "+0.0100",
                       "95 % t interval": "[-0.0500, +0.0700]", "verdict": "inconclusive",
                       "n": 2}
                with open(os.path.join(d, comparisons), "w") as f:
                    json.dump({"rows": [row], "moved": []}, f)
        return run

    monkeypatch.setattr(asct_ragspace, "main", part("asct", "comparisons.json"))
    monkeypatch.setattr(factor_table, "main", part("factor", "shop_comparisons.json"))
    monkeypatch.setattr(factor_fig5, "main", part("fig5", None))
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr(runner, "STATUS", None)
    return seen


def test_quick_prints_status_lines_and_one_final_screen(fake_parts, tmp_path, capsys):
    out_dir = str(tmp_path / "r")
    reproduce.main(_config(jobs=1, results_dir=out_dir))
    out = capsys.readouterr().out
    assert set(fake_parts) == {"asct", "factor", "fig5"}
    assert "| a wide table |" not in out                     # tables go to the logs
    for part in ("asct", "factor", "fig5"):
        log = os.path.join(out_dir, f"reproduce_{part}.log")
        assert "| a wide table |" in open(log).read()
        assert f"[{part}] started; its tables and output: {log}" in out
    assert "[factor] factor_table_smoke_warm/x_s42: held-out success 0.1 -> 0.2" in out
    # Figure 5 diagnoses the FACTOR table's run
    assert fake_parts["fig5"].fig5.train_run == "factor_table_smoke_warm/shop_factor_s42"
    screen = out[out.index("reproduce --config.quick: smoke scale"):]
    assert screen.strip() == open(os.path.join(out_dir, "reproduce_quick_summary.txt")).read(
        ).strip()
    factor = screen[screen.index("FACTOR table, shop analogue"):]
    row = next(l for l in factor.splitlines() if l.strip().startswith("factor - serl"))
    assert row.split()[-4:] == ["-0.0187", "refuted", "10", "yes"]
    assert os.path.exists(os.path.join(out_dir, "reproduce_quick_times.md"))


def test_only_one_part_screens_that_part(fake_parts, tmp_path, capsys):
    reproduce.main(_config(only=("factor",), results_dir=str(tmp_path)))
    out = capsys.readouterr().out
    assert set(fake_parts) == {"factor"} and "FACTOR table, shop analogue" in out
    assert "ASCT table" not in out


def test_the_side_process_prints_no_screen(fake_parts, tmp_path, capsys):
    reproduce.main(_config(side=True, jobs=1, only=("asct",), results_dir=str(tmp_path)))
    out = capsys.readouterr().out
    assert "[asct] started" in out and "smoke scale" not in out
