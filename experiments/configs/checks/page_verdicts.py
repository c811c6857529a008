"""The options of experiments/checks/page_verdicts.py.

    python -m experiments.checks.page_verdicts --config.name=factor_decision \
        "--config.files=('a/shop_comparisons.json', 'b/shop_comparisons.json')"

files: the comparisons.json files of the page's family (a tuple of paths or glob
patterns, required); name:
results/page_verdicts/<name>.{md,json} (required); results_dir; authors: the same tables'
comparisons under the authors' protocol (a verdict column each); family_size: the page's
pre-registered number of rows when only some have run (0: the rows given).
"""
import ml_collections


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"page_verdicts config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.files = ()
    c.name = ""
    c.results_dir = "results"
    c.authors = ()          # the same tables under the authors' protocol (paths or globs)
    c.family_size = 0       # the page's pre-registered rows (0: the rows of `files`)
    return c
