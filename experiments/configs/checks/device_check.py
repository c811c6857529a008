"""The options of experiments/checks/device_check.py.

    python -m experiments.checks.device_check --config.out=results/bench/device_check.json

out: the JSON written; methods: comma-separated method families of the RL step
(experiments.harness.registry names); scale: full or cpu-small ("": cpu-small on CPU, full
on an accelerator).
"""
import ml_collections

from experiments.checks.device_check import FAMILIES, SCALES


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"device_check config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.out = "results/bench/device_check.json"
    c.methods = ",".join(FAMILIES)
    c.scale = ""
    return c


def get_constraints():
    return {"scale": ("",) + tuple(SCALES)}
