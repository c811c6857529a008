"""experiments/checks/page_verdicts.py: a page's rows recomputed from their values, Holm
over all."""
import json

import pytest

from experiments.checks import page_verdicts


def _stored(path, values, rows):
    path.write_text(json.dumps({"key": "final/env/success", "values": values, "rows": rows}))
    return str(path)


def test_page_rows_recompute_each_row_and_correct_over_every_file(tmp_path):
    seeds = ["1", "2", "3", "4"]
    a = {"factor": dict(zip(seeds, [0.50, 0.52, 0.51, 0.53])),
         "grpo": dict(zip(seeds, [0.40, 0.41, 0.40, 0.42]))}        # +0.1075, clear
    b = {"factor": dict(zip(seeds, [0.50, 0.52, 0.51, 0.50])),
         "grpo": dict(zip(seeds, [0.49, 0.50, 0.50, 0.47])),        # +0.0175, weak
         "serl": dict(zip(seeds, [0.49, 0.53, 0.50, 0.50]))}        # no difference
    f1 = _stored(tmp_path / "shop_comparisons.json", a,
                 [{"comparison": "factor - grpo", "paper gap": "+0.1810", "verdict": "shown"}])
    f2 = _stored(tmp_path / "science_comparisons.json", b,
                 [{"comparison": "factor - grpo", "paper gap": "+0.1340",
                   "verdict": "shown"},
                  {"comparison": "factor - serl", "paper gap": "-", "verdict": "inconclusive"}])
    rows = page_verdicts.page_rows([f1, f2])
    assert [r["verdict"] for r in rows] == ["shown", "shown", "inconclusive"]
    # Holm over 3: p_(1) <= 0.05 / 3 kept; p_(2) in (0.025, 0.05) > 0.05 / 2: stop
    assert rows[0]["p"] < 0.05 / 3 and 0.025 < rows[1]["p"] < 0.05
    assert [r["holm_verdict"] for r in rows] == ["shown", "inconclusive", "inconclusive"]


def test_a_stored_verdict_that_does_not_recompute_is_an_error(tmp_path):
    seeds = ["1", "2", "3"]
    v = {"a": dict(zip(seeds, [0.5, 0.6, 0.7])), "b": dict(zip(seeds, [0.5, 0.5, 0.5]))}
    f = _stored(tmp_path / "x_comparisons.json", v,
                [{"comparison": "a - b", "paper gap": "- (claim < 0)", "verdict": "shown"}])
    with pytest.raises(ValueError, match="recomputes to inconclusive"):
        page_verdicts.page_rows([f])


def test_rows_not_yet_run_count_with_p_1_and_the_authors_rows_meet_by_table(tmp_path):
    seeds = ["1", "2", "3", "4"]
    a = {"factor": dict(zip(seeds, [0.50, 0.52, 0.51, 0.53])),
         "grpo": dict(zip(seeds, [0.40, 0.41, 0.40, 0.42]))}
    (tmp_path / "t_tuned").mkdir()
    (tmp_path / "t").mkdir()
    tuned = _stored(tmp_path / "t_tuned" / "shop_comparisons.json", a,
                    [{"comparison": "factor - grpo", "paper gap": "+0.1810", "verdict": "shown"}])
    authors = _stored(tmp_path / "t" / "shop_comparisons.json", a,
                      [{"comparison": "factor - grpo", "paper gap": "+0.1810",
                        "verdict": "shown"}])
    alone = page_verdicts.page_rows([tuned])
    p = alone[0]["p"]
    assert alone[0]["holm_verdict"] == "shown"
    # Over a family of m rows, the one run is kept only if p <= 0.05 / m.
    m = int(0.05 // p) + 1
    assert page_verdicts.page_rows([tuned], family_size=m)[0]["holm_verdict"] == "inconclusive"
    assert page_verdicts.page_rows([tuned], family_size=m - 1)[0]["holm_verdict"] == "shown"
    with pytest.raises(ValueError, match="family_size"):
        page_verdicts.page_rows([tuned, authors], family_size=1)
    joined = page_verdicts.with_authors(alone, page_verdicts.page_rows([authors]))
    assert joined[0]["authors_verdict"] == "shown" and joined[0]["authors_holm"] == "shown"
    assert page_verdicts.with_authors(alone, [])[0]["authors_verdict"] == "-"
