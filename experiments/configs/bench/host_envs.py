"""The options of experiments/bench/host_envs.py.

    python -m experiments.bench.host_envs --config.task=find-non-living-thing --config.envs=4 \
        --config.turns=20 --config.workers=1,2,4

task: the ScienceWorld task; envs: environments per batch; turns; workers: comma-separated
worker counts; seed; out.
"""
import ml_collections


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"bench host_envs config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.task = "find-non-living-thing"
    c.envs = 4
    c.turns = 20
    c.workers = "1,2,4"
    c.seed = 0
    c.out = "results/bench/host_envs.json"
    return c
