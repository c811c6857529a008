"""Tests for asct_jax.infra.run_logger (asct_jax.infra.tables: test_tables.py)."""
import json
import os

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from asct_jax.infra import run_logger
from asct_jax.infra.run_logger import RunLogger


def _config():
    c = ml_collections.ConfigDict()
    c.method = "grpo"
    c.optim = ml_collections.ConfigDict({"lr": 1e-3})
    c.dims = (1, 2)
    return c


def _run(tmp_path, steps, resume_step=None, **kw):
    with RunLogger(tmp_path, "exp", "seed42", _config(), total_steps=6,
                   resume_step=resume_step, progress=False, **kw) as log:
        for s in steps:
            log.log(s, {"loss": jnp.array(1.0 / s), "return": np.float32(s), "n": s})
        return log


def _lines(tmp_path):
    with open(tmp_path / "exp" / "seed42" / "metrics.jsonl") as f:
        return f.read().splitlines()


def test_files_exist_and_are_valid(tmp_path):
    log = _run(tmp_path, range(1, 4))
    run_dir = tmp_path / "exp" / "seed42"
    assert log.run_dir == str(run_dir)
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg == {"method": "grpo", "optim": {"lr": 1e-3}, "dims": [1, 2]}
    recs = [json.loads(l) for l in _lines(tmp_path)]
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert recs[1] == {"step": 2, "loss": 0.5, "return": 2.0, "n": 2}
    path = log.write_summary({"utility": np.float64(0.61), "bad": float("nan")})
    assert json.loads(open(path).read()) == {"utility": 0.61, "bad": None}
    plots = log.plot(["loss", "return"], smooth=0.5)
    assert [os.path.basename(p) for p in plots] == ["loss.png", "return.png"]
    for p in plots:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # Nothing half-written is left behind.
    leftovers = [f for _, _, fs in os.walk(run_dir) for f in fs if f.endswith(".tmp")]
    assert leftovers == []


def test_resume_truncates_to_match_an_uninterrupted_run(tmp_path):
    _run(tmp_path / "full", range(1, 7))
    # Interrupted after step 5, last checkpoint at step 3 (plus a torn line from a crash).
    _run(tmp_path / "cut", range(1, 6))
    with open(tmp_path / "cut" / "exp" / "seed42" / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "lo')
    log = _run(tmp_path / "cut", range(4, 7), resume_step=3)
    assert _lines(tmp_path / "cut") == _lines(tmp_path / "full")
    assert [r["step"] for r in log.records] == [1, 2, 3, 4, 5, 6]
    # A fresh run (no resume_step) starts an empty file.
    _run(tmp_path / "cut", [1])
    assert len(_lines(tmp_path / "cut")) == 1


def test_steps_do_not_go_backwards_and_nonfinite_is_null(tmp_path):
    with RunLogger(tmp_path, "exp", "seed42", progress=False) as log:
        rec = log.log(2, {"loss": float("inf"), "vec": jnp.arange(2)})
        assert rec == {"step": 2, "loss": None, "vec": [0, 1]}
        with pytest.raises(ValueError, match="step 1 < last logged step 2"):
            log.log(1, {"loss": 0.0})


def test_tensorboard_optional(tmp_path):
    with pytest.warns(UserWarning, match="tensorboard"):
        log = RunLogger(tmp_path, "exp", "r", progress=False, tensorboard=True)
    log.log(0, {"loss": 1.0})
    log.close()


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "x.json"
    run_logger.atomic_write_json(path, {"a": 1})

    class Boom:
        def __repr__(self):
            raise RuntimeError("boom")

    with pytest.raises(Exception):
        run_logger.atomic_write_text(path, Boom())  # write() of a non-str fails
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["x.json"]
