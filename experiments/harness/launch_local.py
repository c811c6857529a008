"""Starts N training processes on this machine, each with M fake CPU devices, as one run.

    python -m experiments.harness.launch_local --config.processes=2 \
        --config.devices_per_process=2 -- \
        --config experiments/configs/base.py --config.train.run=two_procs

The options before `--` are the fields of experiments/configs/harness/launch_local.py. The
arguments after `--` go to `python -m <module>` (default experiments.train), with
config.train.distributed filled in per process (enabled, a free local port as the
coordinator, num_processes, process_id): the multi-host path of docs/multihost.md on one
machine, over JAX's CPU collectives (gloo). Process 0 prints to this terminal; the others
write <log_dir>/process_<i>.log. Waits for all; when one fails the others are stopped
and the launcher exits with its status, naming it, its log and the log's last lines (when
process 0 fails, every other process's last lines: where they were).
"""
from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Sequence

from asct_jax.infra import config_cli

CONFIG = "experiments/configs/harness/launch_local.py"

DEVICE_FLAG = "--xla_force_host_platform_device_count"
TAIL_LINES = 20


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(devices: int, base: Optional[dict] = None) -> dict:
    """The environment of one process: the CPU platform with `devices` fake devices and
    gloo collectives between processes (any other XLA flag kept)."""
    env = dict(os.environ if base is None else base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
    env["XLA_FLAGS"] = " ".join(flags + [f"{DEVICE_FLAG}={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    return env


def process_args(module: str, args: Sequence[str], address: str, processes: int,
                 index: int) -> List[str]:
    """The command line of process `index`: the module, its arguments, then the
    train.distributed overrides."""
    field = "--config.train.distributed"
    return [sys.executable, "-m", module, *args, f"{field}.enabled=True",
            f"{field}.coordinator_address={address}", f"{field}.num_processes={processes}",
            f"{field}.process_id={index}"]


def _tail(path: str, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _stop(procs: Sequence[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM to every running process, SIGKILL to those still running after grace_s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(processes: int, devices: int, args: Sequence[str], module: str = "experiments.train",
           log_dir: Optional[str] = None, timeout_s: float = 0.0) -> int:
    """Runs the processes to the end; returns 0, or the exit status of the first that
    failed (after stopping the others; 124 on timeout_s), with its message on stderr."""
    log_dir = log_dir or tempfile.mkdtemp(prefix="launch_local_")
    os.makedirs(log_dir, exist_ok=True)
    address = f"127.0.0.1:{free_port()}"
    procs, logs = [], []
    for i in range(processes):
        cmd = process_args(module, args, address, processes, i)
        log = os.path.join(log_dir, f"process_{i}.log")
        out = None if i == 0 else open(log, "w")
        logs.append(None if i == 0 else log)
        procs.append(subprocess.Popen(cmd, env=process_env(devices), stdout=out,
                                      stderr=None if out is None else subprocess.STDOUT))
        if out is not None:
            out.close()
    print(f"launch_local: {processes} processes x {devices} CPU devices, coordinator "
          f"{address}, logs of processes 1..{processes - 1} in {log_dir}",
          file=sys.stderr, flush=True)
    start = time.time()
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i = failed[0]
                _stop(procs)
                where = "" if logs[i] is None else f" (log {logs[i]})"
                print(f"launch_local: process {i} of {processes} failed with exit status "
                      f"{codes[i]}{where}; the others were stopped. Command: "
                      f"{shlex.join(process_args(module, args, address, processes, i))}",
                      file=sys.stderr, flush=True)
                for j, log in enumerate(logs):   # the failed one's, then the others'
                    if log is not None and (j == i or i == 0):
                        sys.stderr.write(f"--- last lines of process {j} ({log}) ---\n"
                                         + _tail(log))
                return codes[i]
            if all(c == 0 for c in codes):
                return 0
            if timeout_s and time.time() - start > timeout_s:
                _stop(procs)
                print(f"launch_local: stopped after timeout {timeout_s:g} s; running: "
                      f"{[i for i, c in enumerate(codes) if c is None]}", file=sys.stderr,
                      flush=True)
                return 124
            time.sleep(0.2)
    except KeyboardInterrupt:
        _stop(procs)
        return 130


def main(config, module_args: Sequence[str] = ()) -> int:
    """Runs `config`'s processes (experiments/configs/harness/launch_local.py), each with
    `module_args` (the command line's arguments after `--`)."""
    return launch(config.processes, config.devices_per_process, list(module_args),
                  config.module, config.log_dir or None, config.timeout)


def split_argv(argv: Sequence[str]):
    """(the launcher's own arguments, argv[0] first; the module's: those after `--`)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    return argv[:argv.index("--")], argv[argv.index("--") + 1:]


if __name__ == "__main__":
    own, rest = split_argv(sys.argv)
    config_cli.run_main(lambda config: main(config, rest), own, default=CONFIG)
