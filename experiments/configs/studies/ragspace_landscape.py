"""The options of experiments/studies/ragspace_landscape.py.

    python -m experiments.studies.ragspace_landscape --config.all

split; dataset; all: every dataset (dataset ignored); out: the JSON written.
"""
from asct_jax.envs import ragspace as rs
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("ragspace_landscape", arg, split="test", dataset="hotpot", all=False,
                        out="results/ragspace_landscape.json")


def get_constraints():
    return {"split": rs.SPLITS, "dataset": rs.DATASETS}
