"""The options of experiments/studies/asct_repeatability.py.

    python -m experiments.studies.asct_repeatability [--config.questions=16] \
        [--config.repeats=4] ["--config.budgets=(12, 48)"]

questions: training questions (their five-action states); repeats: independent searches
per state; budgets: the budgets B (a tuple); out: results path without the .json / .md.
"""
from asct_jax.infra.checks import Range
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("asct_repeatability", arg, questions=16, repeats=4, budgets=(12, 48),
                        out="results/asct_repeatability")


def get_constraints():
    return {"questions": Range(lo=1, integer=True), "repeats": Range(lo=2, integer=True)}
