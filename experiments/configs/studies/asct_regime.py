"""The options of experiments/studies/asct_regime.py.

    python -m experiments.studies.asct_regime --config.name=before
    python -m experiments.studies.asct_regime --config.name=after \
        --config.set=warm_start.label_smoothing=0.5

name: results/asct_regime/<name>.{json,md} (required); set: overrides of
asct_ragspace.py:quick_warm, each "field=value" (a tuple; the value read as a Python
literal, else a string); episodes: training questions (an iteration of the quick scale);
trained: measure this finished run's actor (results/<experiment>/<run>; set
method=<its method>) instead of the warm start's; out: the results folder.
"""
from asct_jax.infra.checks import Range
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("asct_regime", arg, name="", set=(), episodes=160, trained="",
                        out="results/asct_regime")


def get_constraints():
    return {"episodes": Range(lo=1, integer=True)}
