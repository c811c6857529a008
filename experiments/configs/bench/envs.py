"""The options of experiments/bench/envs.py.

    python -m experiments.bench.envs [--config.episodes=1024] [--config.out=results/bench/envs.json]

episodes; size; envs: comma-separated; out.
"""
from asct_jax.envs import SIZES
from experiments.bench.envs import ENVS
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("bench envs", arg, episodes=1024, size="small", envs=",".join(ENVS),
                        out="results/bench/envs.json")


def get_constraints():
    return {"size": SIZES}
