"""The options of experiments/checks/page_verdicts.py.

    python -m experiments.checks.page_verdicts --config.name=factor_decision \
        "--config.files=('a/shop_comparisons.json', 'b/shop_comparisons.json')"

files: the comparisons.json files of the page's family (a tuple of paths or glob
patterns, required); name:
results/page_verdicts/<name>.{md,json} (required); results_dir; authors: the same tables'
comparisons under the authors' protocol (a verdict column each); family_size: the page's
pre-registered number of rows when only some have run (0: the rows given).
"""
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("page_verdicts", arg, files=(), name="", results_dir="results",
                        authors=(),  # the same tables under the authors' protocol (paths or globs)
                        family_size=0)  # the page's pre-registered rows (0: the rows of `files`)
