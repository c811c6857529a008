"""The options of experiments/checks/protocol_check.py.

    python -m experiments.checks.protocol_check --config.table=factor
    python -m experiments.checks.protocol_check --config.table=factor --config.lr_sweep=3e-4,1e-3

table: factor or asct (required); results_dir; lr_sweep: comma-separated rates: train the
table's first baseline at each (the table's lr is chosen from these).
"""
import ml_collections

from experiments.checks.protocol_check import TABLES


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"protocol_check config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.table = ""
    c.results_dir = "results"
    c.lr_sweep = ""
    return c


def get_constraints():
    return {"table": ("",) + tuple(TABLES)}
