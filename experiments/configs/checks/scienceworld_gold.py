"""The options of experiments/checks/scienceworld_gold.py.

    python -m experiments.checks.scienceworld_gold --config.tasks=find-non-living-thing,find-plant \
        --config.variations=5 --config.split=train --config.k=32,64,128

tasks: comma-separated ScienceWorld tasks; variations: the first variations of the split
per task; split; k: comma-separated candidate budgets K of VerbQuotaRule; seed; out: the
JSON written.
"""
import ml_collections

from asct_jax.infra.checks import Range

SPLITS = ("train", "dev", "test")


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"scienceworld_gold config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.tasks = "find-non-living-thing,lifespan-longest-lived,find-plant,power-component"
    c.variations = 5
    c.split = "train"
    c.k = "32,64,128"
    c.seed = 0
    c.out = "results/scienceworld/gold.json"
    return c


def get_constraints():
    return {"split": SPLITS, "variations": Range(lo=1, integer=True)}
