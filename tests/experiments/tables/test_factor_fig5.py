"""Smoke test of experiments/tables/factor_fig5.py's panel computations (factor_jax.figure5's
Diagnostics, tested in tests/factor_jax/test_figure5.py) on a tiny config (no training: early = late
= the initial parameters)."""
import os

import jax
import numpy as np
import pytest

from asct_jax.infra import config_cli
from asct_jax.rl.build import build_learner
from asct_jax.rl.sources import JaxEnvSource
from experiments.harness import registry
from experiments.tables import factor_fig5 as fig5
from experiments.tables import factor_fig5_panels as panels
from tests.helpers.factor_fig5 import tiny_config
from tests.helpers import REPO_ROOT

# The module fixture runs Figure 5's whole diagnostic pipeline: the slow tier.
pytestmark = pytest.mark.slow

ROOT = REPO_ROOT
CONFIG = os.path.join(ROOT, "experiments/configs/factor_fig5.py")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    c = tiny_config(tmp_path_factory.mktemp("fig5"))
    source = JaxEnvSource(c)
    exp = build_learner(c, registry.get(c.method), source)
    params = exp.init_state.params
    parts = fig5.exp_parts(c, source, exp)
    diag = fig5.diagnostics(c, *parts)
    phase = (params, exp.init_state.method_state)
    res = fig5.run_diagnostics(c, parts, phase, phase, diag=diag, warmed_params=phase)
    return c, exp, params, res, diag


def test_conservation_apm_zero_softmax_not(setup):
    _, _, _, res, _ = setup
    cons, arr = res["conservation"], res["_arrays"]
    assert cons["n_actions"] > 0
    assert arr["cons_apm"].shape == arr["cons_softmax"].shape == (cons["n_actions"],)
    assert np.all(np.isfinite(arr["cons_apm"])) and np.all(np.isfinite(arr["cons_softmax"]))
    assert cons["apm_max"] < 1e-5
    # softmax weights sum to 1: |mean - 1| = 1 - 1/L_t over the L_t action tokens, 0 for a
    # single choice token, >= 1/2 for two or more (the batch has such actions)
    assert cons["softmax_max"] >= 0.5 - 1e-6 and cons["softmax_mean"] > 0.0
    np.testing.assert_allclose(cons["softmax_mean"], cons["softmax_expected_mean"], atol=1e-5)


def test_calibration_shapes_and_finite(setup):
    c, _, _, res, _ = setup
    arr = res["_arrays"]
    for phase in ("early", "warmed", "late"):
        m = res[f"calibration_{phase}"]
        x, y = arr[f"credit_{phase}"], arr[f"mc_{phase}"]
        assert 0.0 <= m["interior_credit_share"] <= 1.0 and m["interior_actions"] > 0
        assert m["critic_loss"] >= 0.0 and m["target_online_spread"] >= 0.0
        assert -1.0 - 1e-5 <= m["corr_online"] <= 1.0 + 1e-5
        assert x.shape == y.shape == (int(m["count"]),) and x.size > 0
        assert np.all(np.isfinite(x)) and np.all(np.isfinite(y))
        for k in ("corr", "rmse", "mae", "bias"):
            assert np.isfinite(m[k]), (phase, k)
        assert -1.0 - 1e-5 <= m["corr"] <= 1.0 + 1e-5
        assert m["tac_sum_err_max"] < 1e-4  # telescoping: sum_t A*_t = A_seq
        # the reference in TAC's coordinate, beside the environment's (the earlier one)
        assert m["reference"] == "tac_coordinate" and m["mc_unscored_states"] >= 0
        for k in ("corr_interior", "corr_interior_without_r"):
            assert np.isnan(m[k]) or -1.0 - 1e-5 <= m[k] <= 1.0 + 1e-5
        e = m["env_coordinate"]
        assert e["count"] == m["count"] and -1.0 - 1e-5 <= e["corr"] <= 1.0 + 1e-5
        assert e["mc_noise_sd"] >= 0.0 and m["mc_noise_sd"] >= 0.0
        # s^2 (with n - 1) of outcomes in [0, 1] is at most M / (M - 1) x Bernoulli's
        mc = c.fig5.mc_rollouts
        assert 0.0 <= m["mc_noise_sd_est"] <= m["mc_noise_sd"] * np.sqrt(mc / (mc - 1)) + 1e-6
        f = res[f"feedback_control_{phase}"]
        assert f["tokens"] > 0 and -1.0 - 1e-5 <= f["pearson_r"] <= 1.0 + 1e-5


def test_perturbation_table(setup):
    c, _, _, res, _ = setup
    p = res["perturbation"]
    assert 0 <= p["n_pos"] <= c.fig5.perturb_actions and 0 <= p["n_neg"] <= c.fig5.perturb_actions
    if p["n_pos"] + p["n_neg"] == 0:
        pytest.skip("no eligible action in this tiny batch")
    assert len(p["table"]) == 2 * 2 * len(c.fig5.perturb_modes)
    for key, row in p["table"].items():
        if row["n"]:
            assert np.isfinite(row["mean"]) and 0.0 <= row["changed_frac"] <= 1.0, key
    # UNK makes any action unparseable: high and low give the same outcome.
    for s in ("pos", "neg"):
        hi, lo = p["table"][f"unk/high/{s}"], p["table"][f"unk/low/{s}"]
        if hi["n"]:
            np.testing.assert_allclose(hi["mean"], lo["mean"], atol=1e-6)


def test_plot_and_config(setup, tmp_path):
    _, _, _, res, _ = setup
    path = panels.plot(res, str(tmp_path / "fig5.png"), "smoke")
    assert os.path.getsize(path) > 0
    cfg = config_cli.parse_config(["--config", CONFIG + ":quick"])
    assert cfg.fig5.mc_rollouts == 8 and cfg.method == "factor"
    with pytest.raises(config_cli.ConfigError):
        config_cli.parse_config(["--config", CONFIG, "--config.fig5.perturb_modes=('bogus',)"])


# -- fig5.train_run: diagnose a finished run instead of training one ------------------

def _finished_run(tmp_path, **fields):
    """A finished run's folder (config.json, summary.json) of a factor_fig5 config."""
    from asct_jax.infra.run_logger import atomic_write_json
    from experiments.harness.dotted import apply_overrides

    stored = apply_overrides(tiny_config(tmp_path), fields)
    run_dir = tmp_path / "table" / "shop_factor_s42"
    atomic_write_json(str(run_dir / "config.json"), config_cli.config_to_dict(stored))
    atomic_write_json(str(run_dir / "summary.json"), {"final/env/success": 0.5})
    return "table/shop_factor_s42"


def test_adopted_run_decides_the_training_fields(tmp_path):
    run = _finished_run(tmp_path, **{"seed": 43, "ppo.lr": 1e-4, "rollout.group_size": 8,
                                     "fig5.mc_rollouts": 99})
    c = tiny_config(tmp_path)
    c.fig5.train_run = run
    adopted, summary = fig5.adopt_run(c)
    assert (adopted.seed, adopted.ppo.lr, adopted.rollout.group_size) == (43, 1e-4, 8)
    assert adopted.fig5.mc_rollouts == c.fig5.mc_rollouts      # the diagnostics stay ours
    assert summary == {"final/env/success": 0.5}


@pytest.mark.parametrize("fields,problem", [(None, "holds no finished run"),
                                            ({"method": "grpo"}, "trained 'grpo'")])
def test_adopting_no_factor_run_is_a_one_line_error(tmp_path, fields, problem):
    c = tiny_config(tmp_path)
    c.fig5.train_run = "table/shop_factor_s42" if fields is None else \
        _finished_run(tmp_path, **fields)
    with pytest.raises(config_cli.ConfigError, match=rf"^fig5.train_run: .*{problem}") as e:
        fig5.adopt_run(c)
    assert "\n" not in str(e.value)


def test_figure_of_an_adopted_run_reads_its_last_checkpoint(tmp_path, monkeypatch):
    """A 2-step run (checkpoint_every 5: the last step is kept anyway), then Figure 5 on
    it: no training, the late parameters are the run's final ones."""
    from experiments.harness.runner import train_run

    seen = {}
    real = fig5.run_diagnostics

    def spy(config, parts, early, late, **kw):
        seen["late"] = late
        return real(config, parts, early, late, **kw)
    monkeypatch.setattr(fig5, "run_diagnostics", spy)

    c = tiny_config(tmp_path)
    c.train.steps = c.train.eval_every = 2
    c.train.checkpoint_every = 5
    c.train.experiment, c.train.run = "table", "shop_factor_s42"
    c.train.progress = False
    c.train.eval_episodes = 8
    _, params = train_run(c, return_params=True)
    f = tiny_config(tmp_path)
    f.fig5.train_run = "table/shop_factor_s42"
    res = fig5.run(f)
    assert res["train_reused"] and res["train_run"] == "table/shop_factor_s42"
    assert not os.path.exists(tmp_path / "factor_fig5" / "train_quick")   # nothing trained
    assert res["train_summary"]["steps"] == 2
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(seen["late"][0])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))



def test_critic_calibration_hand_case():
    """Two episodes of 4 and 2 turns: the interior actions are t = 1, 2 of the first;
    the online head's values are twice the target's (spread 0.5); value_corr reads the
    states t >= 1."""
    import types

    import jax.numpy as jnp

    import factor_jax as fj
    tm = np.array([[True] * 4, [True, True, False, False]])
    values = jnp.array([[0.0, 0.5, 0.52, 0.9], [0.0, 0.3, 0.0, 0.0]])
    pieces = types.SimpleNamespace(
        credit=jnp.array([[0.1, 0.02, 0.005, 0.3], [0.2, -0.2, 0.0, 0.0]]),
        values=values, values_online=2.0 * values,
        rewards=jnp.array([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]),
        baseline=jnp.array([0.5, 0.5]), critic_metrics={"critic_loss": jnp.float32(0.25)})
    v_mc = np.array([[0.0, 0.4, 0.6, 1.0], [0.0, 0.2, 0.0, 0.0]], np.float32)
    a_mc = np.asarray(fj.tac_credit(pieces.rewards, jnp.asarray(v_mc), pieces.baseline,
                                    jnp.asarray(tm)))
    var = np.asarray(fj.mc_noise_var(jnp.asarray(v_mc), True, 1.0, 4))
    m = panels.critic_calibration(pieces, a_mc, v_mc, tm, state_var=var)
    # noise: V(1 - V) / 4 at x_t plus at x_{t+1} (0 at x_0 and x_T), over the 6 actions
    np.testing.assert_allclose(m["mc_noise_sd"], np.sqrt((0.06 + 0.12 + 0.06 + 0.04
                                                          + 0.04) / 6), rtol=1e-5)
    np.testing.assert_allclose(m["mc_credit_sd"], a_mc[tm].std(), rtol=1e-6)
    assert m["interior_actions"] == 2 and m["interior_credit_share"] == 0.5
    assert m["critic_loss"] == 0.25
    np.testing.assert_allclose(m["target_online_spread"], 0.5, rtol=1e-5)
    inner = tm & (np.arange(4) >= 1)
    np.testing.assert_allclose(m["value_corr"],
                               np.corrcoef(np.asarray(values)[inner], v_mc[inner])[0, 1],
                               rtol=1e-5)
    assert -1.0 <= m["corr_online"] <= 1.0


def test_interior_calibration_hand_case():
    """Interior actions only (t = 1, 2 of a 4-turn episode, t = 1 of a 3-turn one):
    with r_t shared, and the values' differences alone."""
    tm = np.array([[True] * 4, [True] * 3 + [False]])
    rewards = np.array([[0.0, 1.0, -1.0, 5.0], [0.0, 2.0, 0.0, 0.0]])
    dv = np.array([[9.0, 0.1, 0.2, 9.0], [9.0, 0.3, 9.0, 0.0]])      # A* - r_t
    dv_mc = np.array([[-9.0, 0.2, 0.1, -9.0], [-9.0, 0.6, -9.0, 0.0]])
    m = panels.interior_calibration(rewards + dv, rewards + dv_mc, rewards, tm)
    x, y = np.array([1.1, -0.8, 2.3]), np.array([1.2, -0.9, 2.6])
    np.testing.assert_allclose(m["corr_interior"], np.corrcoef(x, y)[0, 1], rtol=1e-5)
    np.testing.assert_allclose(m["corr_interior_without_r"],
                               np.corrcoef([0.1, 0.2, 0.3], [0.2, 0.1, 0.6])[0, 1], rtol=1e-5)


def test_feedback_control_splits_delta_by_progress(setup):
    """The control reports the teacher's mean Delta on progress / no-progress actions, with
    and without the feedback, over every real action of the batch."""
    _, _, _, res, _ = setup
    for phase in ("early", "late"):
        f = res[f"feedback_control_{phase}"]
        assert f["progress_actions"] + f["no_progress_actions"] > 0
        assert all(k in f for k in ("delta_progress_mean", "delta_no_progress_mean",
                                    "delta_progress_mean_no_feedback",
                                    "delta_no_progress_mean_no_feedback"))


def test_progress_delta_hand_counted():
    """Per action, Delta summed over its allocated tokens; then the mean per group."""
    delta = np.array([[[1.0, 2.0], [0.5, 9.0], [4.0, 4.0]]])        # B 1, T 3, A 2
    mask = np.array([[[True, True], [True, False], [True, True]]])
    progress = np.array([[True, False, True]])
    turns = np.array([[True, True, False]])                         # turn 2 did not happen
    out = panels.progress_delta(delta, -2 * delta, mask, progress, turns)
    assert out["progress_actions"] == 1 and out["no_progress_actions"] == 1
    assert out["delta_progress_mean"] == 3.0 and out["delta_no_progress_mean"] == 0.5
    assert out["delta_progress_mean_no_feedback"] == -6.0
    assert out["delta_no_progress_mean_no_feedback"] == -1.0


def test_term_grad_norms_at_steps_1_5_and_the_last(tmp_path):
    import json

    with open(tmp_path / "metrics.jsonl", "w") as f:
        for s in range(1, 8):
            f.write(json.dumps({"step": s, "train/grad_norm/policy": float(s),
                                "train/grad_norm/aux": 10.0 * s}) + "\n")
            f.write(json.dumps({"step": s, "eval/env/score": 0.5}) + "\n")
    out = panels.term_grad_norms(str(tmp_path))
    assert out == {"grad_policy@1": 1.0, "grad_aux@1": 10.0, "grad_policy@5": 5.0,
                   "grad_aux@5": 50.0, "grad_policy@7": 7.0, "grad_aux@7": 70.0}
    assert panels.term_grad_norms(str(tmp_path / "none")) == {}
