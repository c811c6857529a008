"""The options of experiments/harness/curves.py.

    python -m experiments.harness.curves --config.dir=results/factor_table_quick_warm \
        --config.metric=eval/env/success --config.prefix=shop_

dir: results/<experiment> (required); metric: an eval/<metric> key; prefix: only runs
named <prefix>... ("": one PNG per environment); last_fraction: the part of the step range
the plateau slope is fitted on; out: the output folder ("": <dir>/curves).
"""
from asct_jax.infra.checks import Range
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("curves", arg, dir="", metric="eval/env/success", prefix="",
                        last_fraction=0.25, out="")


def get_constraints():
    return {"last_fraction": Range(lo=0.0, hi=1.0, lo_open=True)}
