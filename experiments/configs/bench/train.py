"""The options of experiments/bench/train.py.

    python -m experiments.bench.train [--config.env=rag_workflow] [--config.methods=grpo,factor]

env; methods: comma-separated; repeats; num_groups, group_size: the batch; chooser
(actor.chooser: candidate scoring or the generating actor); continuations
(actor.continuations: how a generating actor acts at restored states); out; seeds: e.g.
1,4,16: instead, the step wall of that many seeds in one program (the first method),
beside 1 seed.
"""
from experiments.bench.train import DEFAULT_METHODS
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("bench train", arg, env="rag_workflow", methods=",".join(DEFAULT_METHODS),
                        repeats=3, num_groups=8, group_size=8, chooser="candidates",
                        continuations="chooser", out="results/bench/train.json", seeds="")


def get_constraints():
    return {"chooser": ("candidates", "generate"), "continuations": ("chooser", "score")}
