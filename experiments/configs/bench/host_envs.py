"""The options of experiments/bench/host_envs.py.

    python -m experiments.bench.host_envs --config.task=find-non-living-thing --config.envs=4 \
        --config.turns=20 --config.workers=1,2,4

task: the ScienceWorld task; envs: environments per batch; turns; workers: comma-separated
worker counts; seed; out.
"""
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("bench host_envs", arg, task="find-non-living-thing", envs=4, turns=20,
                        workers="1,2,4", seed=0, out="results/bench/host_envs.json")
