"""experiments.harness.launch_local: `launch` runs N processes of a module with the
train.distributed overrides (one coordinator, ids 0..N-1) and each its environment (the
fake-device flag replaced, other XLA flags kept), process 0 on this terminal and the
others into <log_dir>/process_<i>.log; returns 0, or the first failure's status after
stopping the others and naming it (its log's last lines; when process 0 fails, every
other's), 124 on timeout, 130 on Ctrl-C. `_stop` terminates then kills; `split_argv`,
`main`, `process_env`, `_tail`. No training runs: the processes are a trivial module
written here (a few, short) or fakes of subprocess.Popen."""
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, strategies as st

from experiments.harness import launch_local as ll

# The processes' module: prints its arguments and environment, then acts on --act=<id>:<x>
# (x: an exit status, or "sleep" for 30 s) for its own process id; 0 otherwise.
PROC = textwrap.dedent("""\
    import os, sys, time
    pid = int(sys.argv[-1].split("=")[1])
    print("argv", " ".join(sys.argv[1:]), flush=True)
    print("env", os.environ["XLA_FLAGS"], os.environ["JAX_PLATFORMS"],
          os.environ["JAX_CPU_COLLECTIVES_IMPLEMENTATION"], flush=True)
    for a in sys.argv:
        if a.startswith("--act=%d:" % pid):
            x = a.split(":")[1]
            if x == "sleep":
                time.sleep(30)
            sys.exit(int(x))
""")
FIELD = "--config.train.distributed"


@pytest.fixture
def module(tmp_path, monkeypatch):
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "tiny_proc.py").write_text(PROC)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mod"))
    monkeypatch.setenv("XLA_FLAGS", "--xla_foo=1 --xla_force_host_platform_device_count=8")
    return "tiny_proc"


def _launch(module, tmp_path, processes, acts, **kw):
    start = time.time()
    code = ll.launch(processes, 3, [f"--act={a}" for a in acts], module=module,
                     log_dir=str(tmp_path / "logs"), **kw)
    return code, time.time() - start


def _log(tmp_path, i):
    return (tmp_path / "logs" / f"process_{i}.log").read_text()


def test_every_process_runs_the_module_with_its_id_and_one_coordinator(module, tmp_path,
                                                                      capfd):
    code, _ = _launch(module, tmp_path, 3, [])
    out, err = capfd.readouterr()
    assert code == 0
    assert "launch_local: 3 processes x 3 CPU devices" in err
    lines = [out.splitlines()[0]] + [_log(tmp_path, i).splitlines()[0] for i in (1, 2)]
    address = lines[0].split(f"{FIELD}.coordinator_address=")[1].split()[0]
    assert address.startswith("127.0.0.1:")
    for i, line in enumerate(lines):                         # process 0 on this terminal
        assert line.split()[1:] == [f"{FIELD}.enabled=True",
                                    f"{FIELD}.coordinator_address={address}",
                                    f"{FIELD}.num_processes=3", f"{FIELD}.process_id={i}"]
    for log in [out] + [_log(tmp_path, i) for i in (1, 2)]:
        assert "env --xla_foo=1 --xla_force_host_platform_device_count=3 cpu gloo" in log


def test_a_failing_process_stops_the_others_and_is_named_with_its_log(module, tmp_path,
                                                                     capfd):
    code, took = _launch(module, tmp_path, 3, ["0:sleep", "1:5", "2:sleep"])
    err = capfd.readouterr().err
    assert code == 5 and took < 20                            # the sleepers were stopped
    log = str(tmp_path / "logs" / "process_1.log")
    assert (f"launch_local: process 1 of 3 failed with exit status 5 (log {log}); the "
            "others were stopped. Command: ") in err
    assert f"--- last lines of process 1 ({log}) ---\nargv --act=0:sleep" in err
    assert "last lines of process 2" not in err               # only the failed one's


def test_when_process_0_fails_every_others_last_lines_are_shown(module, tmp_path, capfd):
    code, took = _launch(module, tmp_path, 3, ["0:7", "1:sleep", "2:sleep"])
    err = capfd.readouterr().err
    assert code == 7 and took < 20
    assert "process 0 of 3 failed with exit status 7; the others" in err    # no log of its own
    for j in (1, 2):
        assert f"--- last lines of process {j} ({tmp_path / 'logs'}/process_{j}.log) ---" in err


def test_timeout_stops_everything_with_124(module, tmp_path, capfd):
    code, took = _launch(module, tmp_path, 2, ["0:sleep", "1:sleep"], timeout_s=1.5)
    err = capfd.readouterr().err
    assert code == 124 and 1.5 <= took < 20
    assert "launch_local: stopped after timeout 1.5 s; running: [0, 1]" in err


# ---------------------------------------------------------------------------- fakes
class FakeProc:
    def __init__(self, codes, stubborn=False):
        self.codes, self.stubborn, self.calls = list(codes), stubborn, []
        self.returncode = None

    def poll(self):
        if self.returncode is None and self.codes:
            self.returncode = self.codes.pop(0)
        return self.returncode

    def terminate(self):
        self.calls.append("terminate")
        if not self.stubborn:
            self.returncode = -15

    def wait(self, timeout=None):
        self.calls.append("wait")
        if self.returncode is None and timeout is not None:
            raise subprocess.TimeoutExpired("x", timeout)
        return self.returncode

    def kill(self):
        self.calls.append("kill")
        self.returncode = -9


def test_stop_terminates_the_running_and_kills_who_outlives_the_grace():
    done, polite, stubborn = FakeProc([0]), FakeProc([None] * 9), FakeProc([None] * 9, True)
    ll._stop([done, polite, stubborn], grace_s=0.01)
    assert "terminate" not in done.calls and polite.calls == ["terminate", "wait"]
    assert stubborn.calls == ["terminate", "wait", "kill", "wait"]
    assert stubborn.returncode == -9


def _fake_popen(monkeypatch, procs, seen):
    def popen(cmd, env=None, stdout=None, stderr=None):
        seen.append((cmd, env, stdout, stderr))
        return procs[len(seen) - 1]
    monkeypatch.setattr(ll.subprocess, "Popen", popen)
    monkeypatch.setattr(ll, "free_port", lambda: 4321)


def test_ctrl_c_stops_every_process_with_130(monkeypatch, tmp_path):
    procs, seen = [FakeProc([None] * 99) for _ in range(2)], []
    _fake_popen(monkeypatch, procs, seen)

    def interrupt(_):
        raise KeyboardInterrupt
    monkeypatch.setattr(ll.time, "sleep", interrupt)
    assert ll.launch(2, 1, ["-x"], module="m", log_dir=str(tmp_path / "new" / "dir")) == 130
    assert all(p.calls[0] == "terminate" for p in procs)
    assert [c[0][1:3] for c in seen] == [["-m", "m"]] * 2 and seen[0][0][0] == sys.executable
    assert seen[0][2] is None and seen[1][3] is subprocess.STDOUT          # 1 -> its log
    assert os.path.isdir(tmp_path / "new" / "dir")                         # made on demand
    assert all(f"{FIELD}.coordinator_address=127.0.0.1:4321" in c[0] for c in seen)


def test_all_succeed_returns_0_and_no_log_dir_makes_a_temporary_one(monkeypatch, capfd):
    procs, seen = [FakeProc([None, 0]), FakeProc([0])], []
    _fake_popen(monkeypatch, procs, seen)
    monkeypatch.setattr(ll.time, "sleep", lambda _: None)
    assert ll.launch(2, 2, [], module="m") == 0
    log_dir = capfd.readouterr().err.split(" in ")[-1].strip()
    assert os.path.basename(log_dir).startswith("launch_local_") and os.path.isdir(log_dir)
    shutil.rmtree(log_dir)
    assert seen[1][0][-1] == f"{FIELD}.process_id=1" and procs[0].calls == []


def test_main_passes_the_config_fields(monkeypatch):
    calls = []
    monkeypatch.setattr(ll, "launch", lambda *a: calls.append(a) or 0)
    config = type("Config", (), dict(processes=4, devices_per_process=2, module="mm",
                                     log_dir="", timeout=7.0))
    assert ll.main(config, ("--a", "b")) == 0
    assert calls == [(4, 2, ["--a", "b"], "mm", None, 7.0)]


# ---------------------------------------------------------------------------- helpers
@given(own=st.lists(st.sampled_from(["--config.processes=2", "-v", "x"]), max_size=3),
       rest=st.lists(st.sampled_from(["--config=b.py", "--", "y"]), max_size=3))
def test_split_argv_splits_at_the_first_double_dash(own, rest):
    assert ll.split_argv(["prog"] + own) == (["prog"] + own, [])
    assert ll.split_argv(["prog"] + own + ["--"] + rest) == (["prog"] + own, rest)


FLAG = st.sampled_from(["--xla_a=1", "--xla_b", f"{ll.DEVICE_FLAG}=8",
                        f"{ll.DEVICE_FLAG}=2", "--xla_c=x"])


@given(flags=st.lists(FLAG, max_size=5), devices=st.integers(1, 16))
def test_process_env_replaces_only_the_device_flag(flags, devices):
    base = {"XLA_FLAGS": " ".join(flags), "OTHER": "1", "JAX_PLATFORMS": "tpu"}
    snapshot = dict(base)
    env = ll.process_env(devices, base)
    kept = [f for f in flags if not f.startswith(ll.DEVICE_FLAG)]
    assert env["XLA_FLAGS"].split() == kept + [f"{ll.DEVICE_FLAG}={devices}"]
    assert env["OTHER"] == "1" and env["JAX_PLATFORMS"] == "cpu" and base == snapshot


def test_process_env_defaults_to_this_environment(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("LAUNCH_LOCAL_TEST", "yes")
    env = ll.process_env(2)
    assert env["LAUNCH_LOCAL_TEST"] == "yes" and env["XLA_FLAGS"] == f"{ll.DEVICE_FLAG}=2"


def test_tail_is_the_last_lines_or_empty(tmp_path):
    path = tmp_path / "log"
    path.write_text("".join(f"line {i}\n" for i in range(30)))
    assert ll._tail(str(path), 3) == "line 27\nline 28\nline 29\n"
    assert ll._tail(str(path)) == "".join(f"line {i}\n" for i in range(10, 30))
    assert ll._tail(str(tmp_path / "missing")) == ""
