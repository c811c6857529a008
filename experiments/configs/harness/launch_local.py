"""The options of experiments/harness/launch_local.py (the arguments after `--` go to the
module every process runs).

    python -m experiments.harness.launch_local --config.processes=2 \
        --config.devices_per_process=2 -- --config experiments/configs/base.py

processes, devices_per_process: how many processes, with how many CPU devices each;
module: the entry point every process runs (python -m MODULE); log_dir: where processes
1.. write their output ("": a new temp dir); timeout: stop every process after this many
seconds (0: no limit).
"""
from asct_jax.infra.checks import Range
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("launch_local", arg, processes=2, devices_per_process=1,
                        module="experiments.train", log_dir="", timeout=0.0)


def get_constraints():
    return {"processes": Range(lo=1, integer=True),
            "devices_per_process": Range(lo=1, integer=True)}
