"""The options of experiments/checks/scienceworld_gold.py.

    python -m experiments.checks.scienceworld_gold --config.tasks=find-non-living-thing,find-plant \
        --config.variations=5 --config.split=train --config.k=32,64,128

tasks: comma-separated ScienceWorld tasks; variations: the first variations of the split
per task; split; k: comma-separated candidate budgets K of VerbQuotaRule; seed; out: the
JSON written.
"""
from asct_jax.infra.checks import Range
from experiments.configs.options import tool_options

SPLITS = ("train", "dev", "test")


def get_config(arg: str = ""):
    return tool_options(
        "scienceworld_gold", arg,
        tasks="find-non-living-thing,lifespan-longest-lived,find-plant,power-component",
        variations=5, split="train", k="32,64,128", seed=0, out="results/scienceworld/gold.json")


def get_constraints():
    return {"split": SPLITS, "variations": Range(lo=1, integer=True)}
