"""Where FACTOR's token weights put the credit (experiments/studies/factor_allocation.py).

    python -m experiments.studies.factor_allocation --config experiments/configs/factor_allocation.py
    python -m experiments.studies.factor_allocation --config experiments/configs/factor_allocation.py:scratch

The FACTOR table's reduced config (`factor_table.py:quick_warm`, or `:quick` with
"scratch"), seed 7 (a tuning seed, not a reporting one), one batch of 8 groups x 8 episodes
per environment.
"""
from experiments.configs import factor_table


def get_config(arg: str = ""):
    if arg not in ("", "scratch"):
        raise ValueError(f"factor_allocation config arg must be '' or 'scratch', got {arg!r}")
    c = factor_table.get_config("quick" if arg == "scratch" else "quick_warm")
    c.seed = 7
    c.rollout.num_groups = 8
    c.table.envs = factor_table.ENVS
    c.train.experiment = "factor_allocation" + ("_scratch" if arg else "")
    return c


def get_constraints():
    return factor_table.get_constraints()
