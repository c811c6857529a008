"""The options of experiments/studies/ragspace_landscape.py.

    python -m experiments.studies.ragspace_landscape --config.all

split; dataset; all: every dataset (dataset ignored); out: the JSON written.
"""
import ml_collections

from asct_jax.envs import ragspace as rs


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"ragspace_landscape config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.split = "test"
    c.dataset = "hotpot"
    c.all = False
    c.out = "results/ragspace_landscape.json"
    return c


def get_constraints():
    return {"split": rs.SPLITS, "dataset": rs.DATASETS}
