"""The options of experiments/checks/device_check.py.

    python -m experiments.checks.device_check --config.out=results/bench/device_check.json

out: the JSON written; methods: comma-separated method families of the RL step
(experiments.harness.registry names); scale: full or cpu-small ("": cpu-small on CPU, full
on an accelerator).
"""
from experiments.checks.device_check import FAMILIES, SCALES
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("device_check", arg, out="results/bench/device_check.json",
                        methods=",".join(FAMILIES), scale="")


def get_constraints():
    return {"scale": ("",) + tuple(SCALES)}
