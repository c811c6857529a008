"""The options of experiments/checks/page_verdicts.py.

    python -m experiments.checks.page_verdicts --config.name=factor_decision \
        "--config.files=('a/shop_comparisons.json', 'b/shop_comparisons.json')"

files: the comparisons.json files of the page's family (a tuple of paths or glob
patterns, required); name:
results/page_verdicts/<name>.{md,json} (required); results_dir.
"""
import ml_collections


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"page_verdicts config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.files = ()
    c.name = ""
    c.results_dir = "results"
    return c
