"""The options of experiments/harness/curves.py.

    python -m experiments.harness.curves --config.dir=results/factor_table_quick_warm \
        --config.metric=eval/env/success --config.prefix=shop_

dir: results/<experiment> (required); metric: an eval/<metric> key; prefix: only runs
named <prefix>... ("": one PNG per environment); last_fraction: the part of the step range
the plateau slope is fitted on; out: the output folder ("": <dir>/curves).
"""
import ml_collections

from asct_jax.infra.checks import Range


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"curves config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.dir = ""
    c.metric = "eval/env/success"
    c.prefix = ""
    c.last_fraction = 0.25
    c.out = ""
    return c


def get_constraints():
    return {"last_fraction": Range(lo=0.0, hi=1.0, lo_open=True)}
