"""The options of experiments/checks/identity_check.py.

    python -m experiments.checks.identity_check --config.out=/tmp/ref
    python -m experiments.checks.identity_check --config.out=/tmp/new --config.compare=/tmp/ref

out: the folder for the cases' records (required); compare: a reference folder to compare
against ("": none); only: substrings of case names (a tuple; () every case); jobs: cases
run at once (processes).
"""
import ml_collections


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"identity_check config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.out = ""
    c.compare = ""
    c.only = ()
    c.jobs = 1
    return c
