"""The options of experiments/bench/search.py.

    python -m experiments.bench.search [--config.env=toy_tree] [--config.batch_sizes=256,1024]

env; policy: pi_old on environments other than toy_tree; batch_sizes, num_simulations,
methods: comma-separated; min_time: seconds of repeated calls per measurement;
step_method: also the search's share of a training step of this ASCT method on ragspace
("": skip); step_batch: num_groups x group_size episodes of that training step; out.
"""
import ml_collections

from experiments.bench.search import METHODS, STEP_METHODS


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"bench search config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.env = "toy_tree"
    c.policy = "uniform"
    c.batch_sizes = "256,1024"
    c.num_simulations = "16,64"
    c.methods = ",".join(METHODS)
    c.min_time = 0.5
    c.step_method = ""
    c.step_batch = "8x2"
    c.out = "results/bench/search.json"
    return c


def get_constraints():
    return {"policy": ("uniform", "tiny"), "step_method": ("",) + tuple(STEP_METHODS)}
