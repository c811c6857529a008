"""The options of experiments/studies/fig5_samples.py.

    python -m experiments.studies.fig5_samples \
        "--config.paths=results/factor_fig5/decision_end_shop_factor_s42*.json"

paths: the factor_fig5 JSONs of one run, one per fig5.seed (a tuple of paths or glob
patterns, required).
"""
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("fig5_samples", arg, paths=())
