"""Several processes, one program (asct_jax.infra.distributed, experiments.harness.launch_local):
2 processes x 2 CPU devices train as 1 process x 4, checkpoints resume across the two
layouts, process 0 alone writes, bad train.distributed fields are one-line errors; and
experiments.checks.device_check runs on CPU and writes its JSON."""
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from asct_jax.infra import config_cli, distributed
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import RunLogger
from experiments.configs import base
from experiments.harness import launch_local
from tests.helpers.rl_train import ROOT, _cli_args, _env, _metrics, build, small_config

BASE = os.path.join(ROOT, "experiments", "configs", "base.py")


# -- config ---------------------------------------------------------------------------

@pytest.mark.parametrize("override,field", [
    ("--config.train.distributed.num_processes=-1", "train.distributed.num_processes"),
    ("--config.train.distributed.process_id=-2", "train.distributed.process_id"),
    ("--config.train.distributed.initialization_timeout=0",
     "train.distributed.initialization_timeout"),
    ("--config.train.distributed.barrier_timeout=0", "train.distributed.barrier_timeout"),
    ("--config.train.distributed.num_processes=two", "train.distributed.num_processes"),
    ("--config.train.distributed.hosts=2", "train.distributed.hosts"),
])
def test_bad_distributed_fields_are_one_line_config_errors(override, field):
    with pytest.raises(ConfigError, match=rf"^{field}: ") as e:
        config_cli.parse_config(["prog", f"--config={BASE}", override])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("fields,field", [
    ({"coordinator_address": "10.0.0.1"}, "train.distributed.coordinator_address"),
    ({"coordinator_address": "10.0.0.1:port"}, "train.distributed.coordinator_address"),
    ({"num_processes": 2, "process_id": 2}, "train.distributed.process_id"),
])
def test_inconsistent_distributed_fields_are_config_errors(fields, field):
    c = base.get_config()
    c.train.distributed.update(dict(enabled=True, **fields))
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        distributed.initialize(distributed.distributed_config(c))


def test_initialize_arguments_leave_empty_fields_to_the_environment():
    c = base.get_config()
    timeouts = {"initialization_timeout": 300, "shutdown_timeout_seconds": 900}
    assert distributed.initialize_kwargs(distributed.distributed_config(c)) == timeouts
    c.train.distributed.update(dict(coordinator_address="10.0.0.1:1234", num_processes=4,
                                    process_id=3))
    assert distributed.initialize_kwargs(distributed.distributed_config(c)) == {
        **timeouts, "coordinator_address": "10.0.0.1:1234",
        "num_processes": 4, "process_id": 3}


def test_off_by_default_and_single_process_helpers():
    assert not base.get_config().train.distributed.enabled
    assert distributed.initialize(distributed.DistributedConfig()) is False   # nothing initialised
    assert distributed.is_primary() and distributed.process_index() == 0
    distributed.barrier("single")                               # a no-op
    f = jax.jit(lambda x: x + 1)
    assert distributed.aligned(f, "f") is f                     # nothing to align
    key = distributed.device_put(jax.random.key(3), jax.devices()[0])
    assert np.array_equal(jax.random.key_data(key), jax.random.key_data(jax.random.key(3)))


def test_a_logger_that_does_not_write_keeps_its_records(tmp_path):
    with RunLogger(tmp_path, "exp", "r", {"a": 1}, progress=False, write=False) as log:
        log.log(0, {"x": 1.0})
        log.log(1, {"x": 2.0})
        log.write_summary({"done": True})
        assert log.plot() == []
    assert [r["x"] for r in log.records] == [1.0, 2.0]
    assert not (tmp_path / "exp").exists()


# -- launcher -------------------------------------------------------------------------

def test_launcher_environment_and_arguments():
    env = launch_local.process_env(3, {"XLA_FLAGS": "--xla_foo=1 "
                                                    "--xla_force_host_platform_device_count=8"})
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=3"
    assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
    args = launch_local.process_args("experiments.train", ["--config=x.py"], "127.0.0.1:5", 2, 1)
    assert args[1:] == ["-m", "experiments.train", "--config=x.py",
                        "--config.train.distributed.enabled=True",
                        "--config.train.distributed.coordinator_address=127.0.0.1:5",
                        "--config.train.distributed.num_processes=2",
                        "--config.train.distributed.process_id=1"]
    assert 0 < launch_local.free_port() < 65536


def test_launcher_names_the_process_that_failed(tmp_path):
    p = subprocess.run([sys.executable, "-m", "experiments.harness.launch_local",
                        "--config.processes=2", f"--config.log_dir={tmp_path}", "--",
                        "--config=/no/such/config.py"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "launch_local: process" in p.stderr and "failed with exit status 2" in p.stderr


# -- two processes x two devices == one process x four ---------------------------------

def _one_process(tmp_path, run, steps, extra=()):
    env = _env(tmp_path)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    p = subprocess.run(_cli_args(tmp_path, run, steps, extra), env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]


def _two_processes(tmp_path, run, steps, extra=()):
    cmd = [sys.executable, "-m", "experiments.harness.launch_local", "--config.processes=2",
           "--config.devices_per_process=2", f"--config.log_dir={tmp_path / f'logs_{run}'}",
           "--config.timeout=900", "--", *_cli_args(tmp_path, run, steps, extra)[3:]]
    p = subprocess.run(cmd, env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True,
                       timeout=1000)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("'method': 'grpo'") == 1, p.stdout   # process 0 alone prints


def _assert_close(a, b):
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert sorted(ra) == sorted(rb)
        for k in ra:
            np.testing.assert_allclose(rb[k], ra[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.slow
def test_two_processes_match_one_and_checkpoints_resume_across_layouts(tmp_path):
    """Run "one": steps 1-2 as 1 process x 4 CPU devices, resumed for steps 3-4 as
    2 processes x 2 (launch_local); run "two": the other way round. Both runs' metrics
    agree at every step, and their final parameters, to float32 tolerance, atol 1e-5
    (test_rl_train's 8-device test: the sharded reductions sum in another order;
    measured here: at most 3e-8). Process 0 alone writes metrics.jsonl."""
    resume = ["--config.train.resume=True"]
    _one_process(tmp_path, "one", 2)
    _two_processes(tmp_path, "two", 2)
    _assert_close(_metrics(tmp_path / "train" / "one" / "metrics.jsonl"),
                  _metrics(tmp_path / "train" / "two" / "metrics.jsonl"))
    _two_processes(tmp_path, "one", 4, resume)      # a 1 x 4 checkpoint read by 2 x 2
    _one_process(tmp_path, "two", 4, resume)        # a 2 x 2 checkpoint read by 1 x 4
    one = _metrics(tmp_path / "train" / "one" / "metrics.jsonl")
    two = _metrics(tmp_path / "train" / "two" / "metrics.jsonl")
    assert [r["step"] for r in one] == [0, 1, 2, 3, 4]   # one line a step: one writer
    _assert_close(one, two)
    from asct_jax.infra.checkpoint import Checkpointer
    target = build(small_config(tmp_path))[0].init_state
    pa, pb = (Checkpointer(str(tmp_path / "train" / r / "checkpoints")).restore(target).state
              for r in ("one", "two"))
    for x, y in zip(jax.tree.leaves(pa.params), jax.tree.leaves(pb.params)):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_enabled_without_a_cluster_exits_2_with_one_line(tmp_path):
    p = subprocess.run(_cli_args(tmp_path, "e", 1, ["--config.train.distributed.enabled=True"]),
                       env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("config error: train.distributed: "), p.stderr


# -- the device check -----------------------------------------------------------------

@pytest.mark.slow
def test_device_check_runs_on_cpu_and_writes_its_json(tmp_path):
    out = tmp_path / "device_check.json"
    p = subprocess.run([sys.executable, "-m", "experiments.checks.device_check",
                        f"--config.out={out}"],
                       env=dict(_env(tmp_path)), cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert {"devices", "scale", "matmul", "rl_step", "fsdp", "generate", "decoder",
            "peak_memory", "runtime_s"} <= set(r)
    assert r["scale"] == "cpu-small" and r["devices"]["backend"] == "cpu"
    assert r["errors"] == []
    assert r["matmul"]["bfloat16_tflops"] > 0 and r["matmul"]["float32_tflops"] > 0
    assert [s["method"] for s in r["rl_step"]] == ["grpo", "asct_agentuct", "factor"]
    for s in r["rl_step"] + [r["fsdp"]]:
        assert s["step_s"] > 0 and s["peak_memory"]["max_rss_bytes"] > 0
        assert s["compiled_memory_bytes"]["peak"] > 0
    assert r["fsdp"]["mesh"] == {"data": 1, "fsdp": 2}
    assert r["fsdp"]["largest_weight_shard_fraction"] == 0.5
    assert r["fsdp"]["max_abs_diff_vs_replicated"] < 1e-3   # bfloat16
    assert [d["model"] for d in r["decoder"]] == ["smollm2-135m", "qwen2.5-0.5b"]
    assert all(d["tokens_per_s"] > 0 and d["mfu_vs_spec"] is None for d in r["decoder"])
    assert r["generate"]["tokens_per_s"] > 0
