"""FACTOR's factor.critic_start "prefit" (this project's option; the authors' "warmup" stays
the default): the critic fitted before step 1 on rollouts of the initial policy
(Method.make_prefit, factor_jax.critic_replay.fit_critic_first, factor_jax.critic.prefit),
its schedule without a warm-up, its env calls in the run's totals, and a resumed or
seed-batched run's prefit."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import factor_jax as fj
from asct_jax.infra.checks import ConfigError
from asct_jax.rl.credit import CreditContext
from experiments.configs import base
from experiments.harness.stored_fields import ADDED_DEFAULTS
from factor_jax import critic as C
from factor_jax.critic_replay import fit_critic_first
from factor_jax.methods import FACTOR, Schedule, factor_config
from tests.helpers.tiers import examples


def _fc(steps: int, **fields):
    c = base.get_config()
    c.method = "factor"
    c.train.steps = steps
    c.factor.update(fields)
    return factor_config(c)


# -- the schedule --------------------------------------------------------------------

@settings(max_examples=examples(30), deadline=None)
@given(steps=st.integers(1, 300), scale=st.booleans())
def test_prefit_has_no_warmup_and_the_teacher_and_lambda_start_at_step_1(steps, scale):
    """No warm-up; eta_1 = eta0, then linear to 0 over D = the authors' 39 teacher steps
    (scaled); lambda_k = max(1 - k / decay, 0) from k = 1; Polyak as under "warmup"."""
    pre = Schedule.of(_fc(steps, critic_start="prefit", scale_schedules=scale))
    warm = Schedule.of(_fc(steps, scale_schedules=scale))
    span = fj.scale_steps(39, steps) if scale else 39
    assert pre == Schedule(warmup=0, eta_start=1, eta_end=span, eta_decay=span,
                           kl_decay=warm.kl_decay, polyak=warm.polyak, eta_origin=1)
    assert float(pre.eta(1, 0.7)) == pytest.approx(0.7)
    assert float(fj.kl_schedule(1, pre.kl_decay)) > 0 or pre.kl_decay == 1


def test_prefit_fields_are_checked_and_default_to_the_authors_warmup():
    fc = _fc(20)
    assert (fc.critic_start, fc.prefit_batches, fc.prefit_critic_steps) == ("warmup", 4, 100)
    assert ADDED_DEFAULTS["factor.critic_start"] == "warmup"   # what stored runs did
    with pytest.raises(ConfigError, match=r"factor\.critic_start"):
        _fc(20, critic_start="early")
    with pytest.raises(ConfigError, match=r"factor\.prefit_critic_steps"):
        _fc(20, critic_start="prefit", prefit_critic_steps=0)


def test_warmup_has_no_prefit_and_host_games_cannot_prefit():
    ctx = CreditContext(policy=None, env=None, env_params=None, group_size=2)
    assert fit_critic_first(_fc(20), ctx) is None
    with pytest.raises(ConfigError, match=r"factor\.critic_start"):
        fit_critic_first(_fc(20, critic_start="prefit"), ctx)


# -- the critic's fit ----------------------------------------------------------------

@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 40))
def test_fit_stats_are_numpys_mse_variance_and_pearson_r(seed, n):
    rng = np.random.default_rng(seed)
    v, y = rng.normal(size=(2, 50)).astype(np.float32)
    mask = np.arange(50) < n
    s = C.fit_stats(jnp.asarray(v), jnp.asarray(y), jnp.asarray(mask))
    np.testing.assert_allclose(float(s["mse"]), np.mean((v[mask] - y[mask]) ** 2), rtol=1e-4)
    np.testing.assert_allclose(float(s["var"]), np.var(y[mask]), rtol=1e-4)
    np.testing.assert_allclose(float(s["r"]), np.corrcoef(v[mask], y[mask])[0, 1],
                               atol=1e-4)
    assert float(s["n"]) == n


def test_prefit_fits_three_quarters_measures_the_rest_and_keeps_the_replay():
    h, w, n = 6, 4, 64
    s = C.init_critic(jax.random.key(0), h, 32, w, n, lr=3e-3)
    feats = jax.random.normal(jax.random.key(1), (w, n, h))
    targets = feats @ jnp.linspace(-1.0, 1.0, h)                   # a linear target
    valid = jnp.arange(n)[None, :] < jnp.array([[64], [64], [40], [0]])
    s = s.replace(features=feats, targets=targets, valid=valid, cursor=jnp.int32(3))
    fit, m = jax.jit(lambda s: C.prefit(s, jax.random.key(2), 3e-3, 64, 300))(s)
    assert float(m["targets"]) + float(m["heldout"]) == float(jnp.sum(valid))
    assert 0.15 < float(m["heldout"]) / float(jnp.sum(valid)) < 0.35
    assert float(m["critic_loss_after"]) < 0.2 * float(m["critic_loss_before"])
    assert float(m["heldout_r"]) > 0.9
    assert float(m["heldout_mse"]) < 0.3 * float(m["heldout_var"])
    for k in fit.online:                                          # target = the fitted head
        np.testing.assert_array_equal(np.asarray(fit.online[k]), np.asarray(fit.target[k]))
    assert not np.array_equal(np.asarray(fit.online["w2"]), np.asarray(s.online["w2"]))
    np.testing.assert_array_equal(np.asarray(fit.valid), np.asarray(valid))   # all back in
    assert int(fit.cursor) == 3


# -- in a run ------------------------------------------------------------------------

def _config(tmp_path, run, steps=2, seed=42, resume=False, start="prefit"):
    c = base.use_test_model(base.get_config())
    c.method, c.seed = "factor", seed
    c.rollout.num_groups, c.rollout.group_size = 2, 2
    c.ppo.update(epochs=1, minibatches=1)
    c.factor.update(continuations=2, horizon=3, critic_width=32, replay_per_step=16,
                    critic_sample=16, critic_start=start, prefit_batches=2,
                    prefit_critic_steps=5, scale_schedules=False)   # the same at any length
    c.train.update(steps=steps, eval_every=1, eval_episodes=4, checkpoint_every=1,
                   results_dir=str(tmp_path), run=run, progress=False, resume=resume,
                   compilation_cache="")
    return c


def _records(tmp_path, run):
    with open(tmp_path / "train" / run / "metrics.jsonl") as f:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
                for line in f]


def _summary(tmp_path, run):
    with open(tmp_path / "train" / run / "summary.json") as f:
        return json.load(f)


@pytest.mark.slow
def test_prefit_moves_the_critic_only_and_counts_its_env_calls(tmp_path):
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from asct_jax.rl.train_step import make_prefit_step

    c = _config(tmp_path, "unit")
    source = JaxEnvSource(c)
    learner = build_learner(c, FACTOR, source)
    before = jax.device_get(learner.init_state.replace(frozen=None))
    fit = make_prefit_step(learner, source.env, source.env_params)
    state, m = fit(learner.init_state, learner.key)
    after = jax.device_get(state.replace(frozen=None))
    for a, b in zip(jax.tree.leaves((before.params, before.opt_state, before.step)),
                    jax.tree.leaves((after.params, after.opt_state, after.step))):
        np.testing.assert_array_equal(a, b)                       # the policy untouched
    assert int(after.step) == 0
    mb, ma = before.method_state, after.method_state
    assert not np.array_equal(mb.online["w2"], ma.online["w2"])   # the critic moved
    np.testing.assert_array_equal(ma.online["w2"], ma.target["w2"])
    assert int(ma.cursor) == 2 and ma.valid.sum() > 0            # two batches in the replay
    # Each batch's episodes took >= 1 env step each (4 episodes), plus continuations.
    assert float(m["prefit/env_calls"]) >= 2 * 4 + 1
    assert float(m["prefit/aux_tokens"]) > 0
    assert float(m["prefit/critic_loss_after"]) < float(m["prefit/critic_loss_before"])
    # Same seed, same numbers.
    learner2 = build_learner(c, FACTOR, source)
    _, m2 = make_prefit_step(learner2, source.env, source.env_params)(
        learner2.init_state, learner2.key)
    assert jax.device_get(m) == jax.device_get(m2)


@pytest.mark.slow
def test_a_prefit_run_starts_with_tacs_credit_and_charges_the_prefit(tmp_path):
    from asct_jax.rl.trainer import train

    summary = train(_config(tmp_path, "pre"), FACTOR)
    recs = _records(tmp_path, "pre")
    assert [r["step"] for r in recs] == [0, 1, 2]
    first = recs[0]
    assert "eval/env/success" in first and first["prefit/env_calls"] > 0
    assert -1.0 <= first["prefit/heldout_r"] <= 1.0
    assert recs[1]["credit/factor/warmup"] == 0.0                # TAC's credit at k = 1
    assert recs[1]["credit/factor/eta"] == pytest.approx(0.7)    # the teacher on at k = 1
    calls = sum(r.get("rollout/env_calls", 0) + r.get("credit/env_calls", 0) for r in recs)
    assert summary["total/env_calls"] == pytest.approx(calls + first["prefit/env_calls"])
    tokens = sum(r.get("credit/aux_tokens", 0) for r in recs)
    assert summary["total/aux_tokens"] == pytest.approx(tokens + first["prefit/aux_tokens"])
    assert "initial/env/success" in summary


@pytest.mark.slow
def test_warmup_runs_no_prefit(tmp_path):
    from asct_jax.rl.trainer import train

    summary = train(_config(tmp_path, "warm", start="warmup"), FACTOR)
    recs = _records(tmp_path, "warm")
    assert not any(k.startswith("prefit/") for r in recs for k in r)
    assert recs[1]["credit/factor/warmup"] == 1.0                # the authors' warm-up
    calls = sum(r.get("rollout/env_calls", 0) + r.get("credit/env_calls", 0) for r in recs)
    assert summary["total/env_calls"] == pytest.approx(calls)


@pytest.mark.slow
def test_a_resumed_run_does_not_prefit_again_and_matches_the_straight_run(tmp_path):
    from asct_jax.rl.trainer import train

    straight = train(_config(tmp_path, "straight", steps=2), FACTOR)
    train(_config(tmp_path, "resumed", steps=1), FACTOR)      # stopped after step 1
    resumed = train(_config(tmp_path, "resumed", steps=2, resume=True), FACTOR)
    a, b = _records(tmp_path, "straight"), _records(tmp_path, "resumed")
    assert sum("prefit/env_calls" in r for r in b) == 1           # the prefit once
    by_step = {r["step"]: r for r in b}
    for r in a[1:]:
        assert by_step[r["step"]] == r, r["step"]                 # bit-identical after it
    assert {k: v for k, v in a[0].items() if k.startswith("prefit/")} == {
        k: v for k, v in b[0].items() if k.startswith("prefit/")}
    assert resumed["total/env_calls"] == straight["total/env_calls"]


@pytest.mark.slow
def test_a_seed_batch_prefits_each_seed_as_its_own_run(tmp_path):
    from asct_jax.rl.trainer import train, train_seeds

    train_seeds([_config(tmp_path / "batched", f"s{s}", steps=1, seed=s) for s in (42, 43)],
                FACTOR)
    train(_config(tmp_path / "separate", "s42", steps=1, seed=42), FACTOR)
    a = _records(tmp_path / "batched", "s42")
    b = _records(tmp_path / "separate", "s42")
    assert sorted(a[0]) == sorted(b[0])
    for k in a[0]:
        if k.startswith("prefit/"):
            np.testing.assert_allclose(a[0][k], b[0][k], rtol=1e-4, atol=1e-5, err_msg=k)
    other = _records(tmp_path / "batched", "s43")[0]
    assert other["prefit/critic_loss_after"] != a[0]["prefit/critic_loss_after"]
