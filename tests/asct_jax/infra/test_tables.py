"""Tests for asct_jax.infra.tables."""
import math
import os

from asct_jax.infra import tables


def test_mean_std_and_cells():
    m, s = tables.mean_std([1.0, 2.0, 3.0])
    assert m == 2.0 and s == 1.0  # sample std, ddof=1
    m, s = tables.mean_std([0.5])
    assert m == 0.5 and math.isnan(s)
    assert all(math.isnan(v) for v in tables.mean_std([]))
    assert tables.format_mean_std([1.0, 2.0, 3.0], "{:.2f}") == "2.00 ± 1.00"
    assert tables.format_mean_std([0.5, None]) == "0.500 (n=1)"
    assert tables.format_mean_std([]) == "–"


def test_markdown_and_seed_table():
    md = tables.markdown_table([["a", 1], {"name": "b|c", "n": 22}], ["name", "n"])
    assert md.splitlines() == ["| name | n   |", "| :--- | --: |", "| a    |   1 |",
                               "| b\\|c |  22 |"]
    results = {"ppo_gae": {"utility": [0.5, 0.6, 0.7], "aux_tokens": [100, 120, 140]},
               "asct_agentuct": {"utility": [0.61]}}
    md = tables.seed_table(results, ["utility", "aux_tokens"],
                           fmt={"utility": "{:.3f}", "aux_tokens": "{:.0f}"})
    lines = md.splitlines()
    assert lines[0].split("|")[1:-1] == [" method        ", " utility       ", " aux_tokens "]
    assert "0.600 ± 0.100" in lines[2] and "120 ± 20" in lines[2]
    assert "0.610 (n=1)" in lines[3] and lines[3].rstrip().endswith("– |")


def test_scatter_with_errorbars(tmp_path):
    results = {"vineppo": {"utility": [0.59, 0.6], "aux_tokens": [2e5, 2.2e5]},
               "asct_agentuct": {"utility": [0.62, 0.61], "aux_tokens": [1e5, 1.1e5]},
               "one_seed": {"utility": [0.5], "aux_tokens": [1.0]},
               "no_x": {"utility": [0.5]}}
    path = tables.scatter_with_errorbars(str(tmp_path / "plots" / "u_vs_tok.png"), results,
                                         "aux_tokens", "utility", title="utility vs tokens")
    assert open(path, "rb").read(4) == b"\x89PNG"
    assert os.listdir(tmp_path / "plots") == ["u_vs_tok.png"]
