"""The options of the main job (experiments/reproduce.py).

    python -m experiments.reproduce --config.quick               # smoke scale, from the warm start
    python -m experiments.reproduce                              # full scale
    python -m experiments.reproduce --config.quick --config.only=factor --config.jobs=1

Fields: quick (the reduced reproduction), results_dir, only (the parts to run, a tuple of
asct / factor / fig5; () every part), jobs (2: the ASCT table in a second process),
xla_opt_level (XLA:CPU's backend optimisation level; "": 1 with quick, XLA's own
otherwise) and side (set on the second process by the first).
"""
from experiments.configs.options import tool_options

PARTS = ("asct", "factor", "fig5")
OPT_LEVELS = ("", "default", "0", "1", "2", "3")


def get_config(arg: str = ""):
    return tool_options("reproduce", arg, quick=False, results_dir="results", only=(), jobs=2,
                        xla_opt_level="", side=False)


def get_constraints():
    return {"only": PARTS, "jobs": (1, 2), "xla_opt_level": OPT_LEVELS}
