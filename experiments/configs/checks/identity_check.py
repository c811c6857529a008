"""The options of experiments/checks/identity_check.py.

    python -m experiments.checks.identity_check --config.out=/tmp/ref
    python -m experiments.checks.identity_check --config.out=/tmp/new --config.compare=/tmp/ref

out: the folder for the cases' records (required); compare: a reference folder to compare
against ("": none); only: substrings of case names (a tuple; () every case); jobs: cases
run at once (processes).
"""
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("identity_check", arg, out="", compare="", only=(), jobs=1)
