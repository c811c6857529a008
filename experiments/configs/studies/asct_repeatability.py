"""The options of experiments/studies/asct_repeatability.py.

    python -m experiments.studies.asct_repeatability [--config.questions=16] \
        [--config.repeats=4] ["--config.budgets=(12, 48)"]

questions: training questions (their five-action states); repeats: independent searches
per state; budgets: the budgets B (a tuple); out: results path without the .json / .md.
"""
import ml_collections

from asct_jax.infra.checks import Range


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"asct_repeatability config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.questions = 16
    c.repeats = 4
    c.budgets = (12, 48)
    c.out = "results/asct_repeatability"
    return c


def get_constraints():
    return {"questions": Range(lo=1, integer=True), "repeats": Range(lo=2, integer=True)}
