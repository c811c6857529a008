"""The options of experiments/bench/envs.py.

    python -m experiments.bench.envs [--config.episodes=1024] [--config.out=results/bench/envs.json]

episodes; size; envs: comma-separated; out.
"""
import ml_collections

from asct_jax.envs import SIZES
from experiments.bench.envs import ENVS


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"bench envs config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.episodes = 1024
    c.size = "small"
    c.envs = ",".join(ENVS)
    c.out = "results/bench/envs.json"
    return c


def get_constraints():
    return {"size": SIZES}
