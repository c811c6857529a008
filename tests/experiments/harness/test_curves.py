"""Held-out curves (issue 49): experiments.harness.curves on synthetic metrics.jsonl files
(the plateau and the mean band themselves: tests/asct_jax/infra/test_curves.py)."""
import json
import os

import numpy as np
import pytest

from asct_jax.infra import config_cli
from experiments.harness import curves
from tests.helpers import REPO_ROOT

CONFIG = os.path.join(REPO_ROOT, curves.CONFIG)

T975 = {1: 12.706204736174707, 2: 4.302652729749464}   # t_{0.975, df}


def _write_run(root, name, env, records):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"env": {"name": env}}, f)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def _curve(values, every=10):
    """Records as the trainer writes them: train metrics each step, eval/... at step 0 and
    every `every` steps."""
    out = []
    for i, v in enumerate(values):
        out.append({"step": i * every, "eval/env/success": v})
        out.append({"step": i * every + 1, "train/loss": 1.0})
    return out


def test_experiments_curves_on_synthetic_runs(tmp_path):
    root = str(tmp_path / "exp")
    grpo = {42: [0.1, 0.3, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6],
            43: [0.1, 0.5, 0.5, 0.6, 0.8, 0.8, 0.8, 0.8, 0.8]}
    factor = {42: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
              43: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]}
    for seed, v in grpo.items():
        _write_run(root, f"shop_grpo_s{seed}", "shop", _curve(v))
    for seed, v in factor.items():
        _write_run(root, f"shop_factor_s{seed}", "shop", _curve(v))
    _write_run(root, "household_grpo_s42", "household", _curve([0.2, 0.1]))
    os.makedirs(os.path.join(root, "warm_start"))           # not a run: skipped

    report = curves.write_curves(root, "eval/env/success", prefix="shop_")
    assert set(report) == {"shop"}
    entry = report["shop"]
    assert os.path.getsize(entry["png"]) > 0 and entry["png"].endswith(".png")
    g = entry["curves"]["grpo"]
    np.testing.assert_array_equal(g.steps, np.arange(9) * 10)
    np.testing.assert_allclose(g.mean, (np.array(grpo[42]) + grpo[43]) / 2)
    sd = np.std([grpo[42], grpo[43]], axis=0, ddof=1)
    np.testing.assert_allclose(g.hi - g.mean, T975[1] * sd / np.sqrt(2))
    # the best method (highest final mean: factor 0.9) is a straight line: still rising
    assert entry["best"] == "factor"
    p = entry["plateau"]
    assert (p.points, p.from_step, p.flat) == (3, 60.0, False)
    assert p.slope == pytest.approx(0.01)
    with open(entry["png"][:-4] + ".json") as f:
        saved = json.load(f)
    assert saved["best"] == "factor" and saved["plateau"]["slope"] == pytest.approx(0.01)

    # no prefix: one PNG per environment (config.json env.name), methods without "<env>_"
    by_env = curves.write_curves(root, "eval/env/success")
    assert set(by_env) == {"shop", "household"}
    assert set(by_env["shop"]["curves"]) == {"grpo", "factor"}
    assert by_env["household"]["plateau"] is None and "points" in by_env["household"]["note"]
    assert os.path.exists(by_env["household"]["png"])


def test_the_mean_curve_takes_the_steps_every_seed_logged_and_the_cli_runs(tmp_path, capsys):
    root = str(tmp_path)
    _write_run(root, "shop_grpo_s1", "shop", _curve([0.2, 0.4, 0.6, 0.6, 0.6]))
    _write_run(root, "shop_grpo_s2", "shop", _curve([0.4, 0.6, 0.6]))     # stopped early
    curves.main(config_cli.parse_config([f"--config.dir={root}", "--config.prefix=shop_",
                                         "--config.metric=eval/env/success"], default=CONFIG))
    c = curves.curve_report(root, "eval/env/success", "shop_")["shop"]["curves"]["grpo"]
    np.testing.assert_array_equal(c.steps, [0, 10, 20])
    np.testing.assert_allclose(c.mean, [0.3, 0.5, 0.6])
    assert "best grpo" in capsys.readouterr().out
    assert os.path.exists(os.path.join(root, "curves", "shop_eval_env_success.png"))
    with pytest.raises(SystemExit):
        curves.main(config_cli.parse_config([f"--config.dir={root}",
                                             "--config.metric=eval/env/nothing"], default=CONFIG))
