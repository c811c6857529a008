"""The options of experiments/studies/critic_fit.py.

    python -m experiments.studies.critic_fit --config.state=<run>/checkpoints/<step>/state \
        ["--config.lrs=(1e-4, 1e-3)"]

state: a FACTOR run's checkpoint state folder (required); lrs: the learning rates fitted
at (a tuple; default the authors' 1e-4, 3e-4, 1e-3).
"""
import ml_collections


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"critic_fit config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.state = ""
    c.lrs = (1e-4, 3e-4, 1e-3)
    return c
