"""The options of experiments/harness/launch_local.py (the arguments after `--` go to the
module every process runs).

    python -m experiments.harness.launch_local --config.processes=2 \
        --config.devices_per_process=2 -- --config experiments/configs/base.py

processes, devices_per_process: how many processes, with how many CPU devices each;
module: the entry point every process runs (python -m MODULE); log_dir: where processes
1.. write their output ("": a new temp dir); timeout: stop every process after this many
seconds (0: no limit).
"""
import ml_collections

from asct_jax.infra.checks import Range


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"launch_local config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.processes = 2
    c.devices_per_process = 1
    c.module = "experiments.train"
    c.log_dir = ""
    c.timeout = 0.0
    return c


def get_constraints():
    return {"processes": Range(lo=1, integer=True),
            "devices_per_process": Range(lo=1, integer=True)}
