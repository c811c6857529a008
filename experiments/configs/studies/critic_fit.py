"""The options of experiments/studies/critic_fit.py.

    python -m experiments.studies.critic_fit --config.state=<run>/checkpoints/<step>/state \
        ["--config.lrs=(1e-4, 1e-3)"]

state: a FACTOR run's checkpoint state folder (required); lrs: the learning rates fitted
at (a tuple; default the authors' 1e-4, 3e-4, 1e-3).
"""
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("critic_fit", arg, state="", lrs=(1e-4, 3e-4, 1e-3))
