"""The options of experiments/harness/warm_start_artifacts.py.

    python -m experiments.harness.warm_start_artifacts --config.force
    python -m experiments.harness.warm_start_artifacts --config.only=shop-46d2ff40 \
        --config.out=/tmp/w

out: the folder the warm starts go to (default experiments/artifacts/warm_start); force:
replace existing ones; only: these warm starts only (a tuple of names; () every one).
"""
import os

from experiments.configs.options import tool_options

ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "artifacts", "warm_start")


def get_config(arg: str = ""):
    return tool_options("warm_start_artifacts", arg, out=ARTIFACTS, force=False, only=())
