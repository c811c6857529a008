"""The options of experiments/harness/warm_start_artifacts.py.

    python -m experiments.harness.warm_start_artifacts --config.force
    python -m experiments.harness.warm_start_artifacts --config.only=shop-46d2ff40 \
        --config.out=/tmp/w

out: the folder the warm starts go to (default experiments/artifacts/warm_start); force:
replace existing ones; only: these warm starts only (a tuple of names; () every one).
"""
import os

import ml_collections

ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "artifacts", "warm_start")


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"warm_start_artifacts config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.out = ARTIFACTS
    c.force = False
    c.only = ()
    return c
