"""The options of experiments/bench/search.py.

    python -m experiments.bench.search [--config.env=toy_tree] [--config.batch_sizes=256,1024]

env; policy: pi_old on environments other than toy_tree; batch_sizes, num_simulations,
methods: comma-separated; min_time: seconds of repeated calls per measurement;
step_method: also the search's share of a training step of this ASCT method on ragspace
("": skip); step_batch: num_groups x group_size episodes of that training step; out.
"""
from experiments.bench.search import METHODS, STEP_METHODS
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("bench search", arg, env="toy_tree", policy="uniform",
                        batch_sizes="256,1024", num_simulations="16,64", methods=",".join(METHODS),
                        min_time=0.5, step_method="", step_batch="8x2",
                        out="results/bench/search.json")


def get_constraints():
    return {"policy": ("uniform", "tiny"), "step_method": ("",) + tuple(STEP_METHODS)}
