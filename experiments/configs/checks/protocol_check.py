"""The options of experiments/checks/protocol_check.py.

    python -m experiments.checks.protocol_check --config.table=factor
    python -m experiments.checks.protocol_check --config.table=factor --config.lr_sweep=3e-4,1e-3

table: factor or asct (required); results_dir; lr_sweep: comma-separated rates: train the
table's first baseline at each (the table's lr is chosen from these).
"""
from experiments.checks.protocol_check import TABLES
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("protocol_check", arg, table="", results_dir="results", lr_sweep="")


def get_constraints():
    return {"table": ("",) + tuple(TABLES)}
