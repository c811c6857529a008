"""The options of experiments/bench/train.py.

    python -m experiments.bench.train [--config.env=rag_workflow] [--config.methods=grpo,factor]

env; methods: comma-separated; repeats; num_groups, group_size: the batch; chooser
(actor.chooser: candidate scoring or the generating actor); continuations
(actor.continuations: how a generating actor acts at restored states); out; seeds: e.g.
1,4,16: instead, the step wall of that many seeds in one program (the first method),
beside 1 seed.
"""
import ml_collections

from experiments.bench.train import DEFAULT_METHODS


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"bench train config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.env = "rag_workflow"
    c.methods = ",".join(DEFAULT_METHODS)
    c.repeats = 3
    c.num_groups = 8
    c.group_size = 8
    c.chooser = "candidates"
    c.continuations = "chooser"
    c.out = "results/bench/train.json"
    c.seeds = ""
    return c


def get_constraints():
    return {"chooser": ("candidates", "generate"), "continuations": ("chooser", "score")}
