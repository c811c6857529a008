"""experiments/harness/runner.py's policy-step liveness (run_policy_steps, policy_step_cells and
their columns in liveness_table), on synthetic metrics.jsonl + config.json worked by hand."""
import json
import math
import os

import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.harness.runner import (POLICY_STEP_COLUMNS, liveness_table,
                                        run_policy_steps, train_records, update_lrs)
from tests.helpers.tiers import examples


def _run(path, records, lr=0.01, lr_scale=1.0, warmup=0, config=True):
    """A run folder: metrics.jsonl (an eval record first, as the trainer writes) and a
    config.json with the resolved protocol's rate fields."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r in [{"step": 0, "eval/env/success": 0.5}] + records:
            f.write(json.dumps(r) + "\n")
    if config:
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump({"ppo": {"lr": lr, "lr_scale": lr_scale, "warmup_steps": warmup}}, f)
    return str(path)


def _steps(g, updates=None, **terms):
    """Training records of steps 1..T: train/grad_norm g_t, train/updates, and each
    term's train/grad_norm/<term> given as a list."""
    recs = []
    for t, gv in enumerate(g):
        r = {"step": t + 1, "train/grad_norm": gv}
        if updates is not None:
            r["train/updates"] = updates[t]
        r.update({f"train/grad_norm/{k}": v[t] for k, v in terms.items()})
        recs.append(r)
    return recs


def test_effective_step_weights_each_update_by_g_over_its_rms(tmp_path):
    # g = (1, 7): rms = sqrt((1 + 49) / 2) = 5; lr_m = 0.1 x 0.5 = 0.05; updates (1, 2):
    # S = 0.05 x (1 x 1 / 5 + 2 x 7 / 5) = 0.05 x 3 = 0.15. No per-term norms: no S_pol.
    res = run_policy_steps(_run(tmp_path / "r", _steps([1.0, 7.0], [1.0, 2.0]),
                                lr=0.1, lr_scale=0.5))
    assert res["policy_step"] == pytest.approx(0.15)
    assert res["policy_step_no_kl"] is None and res["dominant"] is None
    assert res["g"] == [1.0, 7.0] and res["steps"] == [1, 2]


def test_warm_up_is_counted_in_updates_across_steps(tmp_path):
    # lr_m 0.4, warm-up w = 4: lr(u) = 0.1 + 0.3 min(u, 4) / 4 = 0.1, 0.175, 0.25, 0.325,
    # 0.4, 0.4. Updates (1, 2, 3), g constant (g / rms = 1):
    # S = 0.1 + (0.175 + 0.25) + (0.325 + 0.4 + 0.4) = 1.65.
    res = run_policy_steps(_run(tmp_path / "r", _steps([5.0] * 3, [1.0, 2.0, 3.0]),
                                lr=0.4, warmup=4))
    assert res["policy_step"] == pytest.approx(1.65)
    # the optimiser's own schedule (train_step.make_optimizer)
    sched = optax.linear_schedule(0.4 / 4, 0.4, 4)
    np.testing.assert_allclose(update_lrs(0.4, 4, 6), [sched(u) for u in range(6)],
                               rtol=1e-6)
    # no warm-up (w = max(0, 1) = 1): the full rate from the first update
    np.testing.assert_allclose(update_lrs(0.4, 0, 3), [0.4] * 3)


def test_per_term_norms_give_the_policy_norm_and_the_steps_each_term_dominates(tmp_path):
    # policy (1, 7, 1, 7): rms 5; aux (2, 8, 0, 0) dominates steps 1 and 2, the policy 3
    # and 4; train/grad_norm (every term's, 9) is not used. lr 0.01, one update a step:
    # S = 0.01 (1 + 7 + 1 + 7) / 5 = 0.032; S_pol = 0.01 (1 + 7) / 5 = 0.016.
    recs = _steps([9.0] * 4, policy=[1.0, 7.0, 1.0, 7.0], aux=[2.0, 8.0, 0.0, 0.0],
                  value=[0.0] * 4, entropy=[0.0] * 4, policy_act=[50.0] * 4)
    res = run_policy_steps(_run(tmp_path / "r", recs))
    assert res["policy_step"] == pytest.approx(0.032)
    assert res["policy_step_no_kl"] == pytest.approx(0.016)
    assert res["g"] == [1.0, 7.0, 1.0, 7.0]
    # a policy part (policy_act) is not a term; terms that never dominate have share 0
    assert res["dominant"] == {"policy": 0.5, "aux": 0.5, "entropy": 0.0, "value": 0.0}


def test_a_step_without_any_gradient_is_dominated_by_no_term(tmp_path):
    # step 2: every norm 0 (no advantage, no teacher): neither policy nor aux dominates it
    recs = _steps([1.0, 0.0, 1.0], policy=[3.0, 0.0, 4.0], aux=[5.0, 0.0, 0.0])
    res = run_policy_steps(_run(tmp_path / "r", recs))
    assert res["dominant"] == {"policy": pytest.approx(1 / 3), "aux": pytest.approx(1 / 3)}
    # S_pol: step 3 only; rms of (3, 0, 4) = sqrt(25 / 3); lr 0.01
    assert res["policy_step_no_kl"] == pytest.approx(0.01 * 4 / math.sqrt(25 / 3))


def test_a_step_logged_twice_counts_once_the_last_record(tmp_path):
    # a resumed run logs step 2 again; its second record trained the parameters
    recs = _steps([1.0, 100.0]) + [{"step": 2, "train/grad_norm": 7.0}]
    path = _run(tmp_path / "r", recs, lr=1.0)
    assert [r["train/grad_norm"] for r in train_records(os.path.join(path, "metrics.jsonl"))] \
        == [1.0, 7.0]
    assert run_policy_steps(path)["policy_step"] == pytest.approx((1 + 7) / 5)


def test_a_run_without_config_or_training_records_has_no_policy_steps(tmp_path):
    assert run_policy_steps(_run(tmp_path / "a", _steps([1.0]), config=False)) is None
    assert run_policy_steps(_run(tmp_path / "b", [])) is None


@settings(max_examples=examples(25), deadline=None)
@given(g=st.floats(1e-3, 1e3), lr=st.floats(1e-6, 1e-1),
       updates=st.lists(st.integers(1, 6), min_size=1, max_size=8))
def test_at_a_constant_norm_the_effective_step_is_the_rate_times_the_updates(
        tmp_path_factory, g, lr, updates):
    """g / rms(g) = 1 at a constant norm: S = lr_m x the run's updates, whatever g."""
    path = _run(tmp_path_factory.mktemp("r"), _steps([g] * len(updates),
                                                      [float(u) for u in updates]), lr=lr)
    assert run_policy_steps(path)["policy_step"] == pytest.approx(lr * sum(updates),
                                                                  rel=1e-9)


def test_liveness_table_adds_the_policy_step_columns_as_seed_means(tmp_path):
    # m, seed 42: the per-term run above (S 0.032, S_pol 0.016, policy 0.5 / aux 0.5,
    # g 1, 7, 1, 7). Seed 43: policy (5, 5) above aux (1, 1): S = S_pol = 0.01 x 2 = 0.02,
    # policy 1.0. Means: S 0.026, S_pol 0.018, policy 0.75 / aux 0.25; mean g (4 + 5) / 2;
    # g @1 (1 + 5) / 2 = 3, no run reaches steps 5 or 10, last (7 + 5) / 2 = 6.
    _run(tmp_path / "m_s42", _steps([9.0] * 4, policy=[1.0, 7.0, 1.0, 7.0],
                                     aux=[2.0, 8.0, 0.0, 0.0]))
    _run(tmp_path / "m_s43", _steps([9.0] * 2, policy=[5.0, 5.0], aux=[1.0, 1.0]))
    # n: no per-term norms (S_pol and the shares "-"); seed 43 has no config.json, so only
    # seed 42 counts in the new columns: g (3, 4, 5, 6, 7), rms sqrt(27), lr 1, one update
    _run(tmp_path / "n_s42", _steps([3.0, 4.0, 5.0, 6.0, 7.0]), lr=1.0)
    _run(tmp_path / "n_s43", _steps([1.0]), config=False)
    # o: runs without config.json: every new cell "-"
    _run(tmp_path / "o_s42", _steps([1.0]), config=False)
    text = liveness_table(str(tmp_path), ["m", "n", "o"], (42, 43), {})
    lines = text.strip().splitlines()
    assert lines[0].endswith(" | ".join(POLICY_STEP_COLUMNS) + " |")
    cells = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[-5:]
             for line in lines[2:]}
    assert cells["m"] == ["0.026", "0.018", "4.500", "3.000 / - / - / 6.000",
                          "policy 0.75 / aux 0.25"]
    s_n = 25 / math.sqrt(27)
    assert cells["n"] == [f"{s_n:.3g}", "-", "5.000", "3.000 / 7.000 / - / 7.000", "-"]
    assert cells["o"] == ["-"] * 5
