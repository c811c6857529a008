"""factor_jax.asct_factor: the credit against a NumPy reference of docs/methods.md (ASCT +
FACTOR; HTA, APM): C_{t,j} = A_t omega_{t,j} on the action's tokens with omega the APM
mixture of the HTA scores under the no-warm-up eta schedule, A_t on a written turn's other
tokens, (1/L) sum_j C = A_t; the search's cache threaded as the method state;
`allocation_metrics` by hand; the config and the method record. The search
(`searched_advantages`) and the teacher are stand-ins, so no model or search compiles."""
import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.infra.checks import ConfigError
from asct_jax.rl.credit import CreditContext, installs_credit_state
from asct_jax.rl.methods import ASCT
from experiments.configs import base
from factor_jax import asct_factor as af
from tests.helpers.rollouts import random_rollout

G, B, T, A = 2, 4, 3, 4
CTX = CreditContext(policy=types.SimpleNamespace(pad_id=0), env="ENV", env_params="EP",
                    group_size=G)
CFG = af.asct_factor_config(base.get_config())          # train.steps 60, scale_schedules


def _cfg(cache=True, **factor):
    return af.AsctFactorConfig(asct=dataclasses.replace(CFG.asct, cache=cache),
                               factor=dataclasses.replace(CFG.factor, **factor))


@pytest.fixture(scope="module")
def patched():
    """Stand-ins: the search returns A_t = params["a"] on the real turns, its cache the
    state with "n" + 1 (after new_iteration's "it" + 1); the teacher is pi_old + "shift"."""
    seen = {}

    def search(ac, ctx, params, batch, key, step, rule, cache=None, chat=None):
        seen.update(rule=rule, chat=chat, cache=cache)
        cache = None if cache is None else {**cache, "n": cache["n"] + 1}
        return params["a"] * batch.turn_mask, cache, {"asct/aux_tokens": jnp.float32(5.0)}

    mp = pytest.MonkeyPatch()
    mp.setattr(af, "searched_advantages", search)
    mp.setattr(af, "new_iteration", lambda s: {**s, "it": s["it"] + 1})
    mp.setattr(af, "ledger_chat", lambda unit, ctx: f"chat:{unit}:{ctx.env}")
    mp.setattr(af, "teacher_log_probs", lambda ctx, p, b, prompt: b.logp_old + p["shift"])
    mp.setattr(af, "init_cache", lambda env, env_params: ("cache of", env, env_params))
    cache = {}

    def credit(cfg):
        if cfg not in cache:
            cache[cfg] = jax.jit(af._asct_factor(cfg, CTX))
        return cache[cfg]
    yield credit, seen
    mp.undo()


def _ref_eta(fc, k):
    """eta_k = eta0 max(1 - (k - 1) / D, 0) for 1 <= k <= D: D = round(39 n / 150) >= 1
    (scale_schedules), else 39 (49 - 10 of the authors' 150 steps)."""
    span = max(1, int(np.floor(39 * fc.train_steps / 150 + 0.5))) if fc.scale_schedules else 39
    return fc.eta0 * max(1 - (k - 1) / span, 0) if 1 <= k <= span else 0.0


def _ref_coef(a, delta, tok, act, eta, clip_d, tau):
    """(coef, omega): HTA s = sign(A) clip(Delta, -d, d); APM omega = L ((1 - eta) / L +
    eta softmax(s / tau)) over the action tokens; C = A omega there, A on the others."""
    omega = np.zeros(tok.shape)
    for i, t in np.ndindex(a.shape):
        m = act[i, t]
        if m.any():
            s = np.sign(a[i, t]) * np.clip(delta[i, t, m], -clip_d, clip_d) / tau
            soft = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            omega[i, t, m] = m.sum() * ((1 - eta) / m.sum() + eta * soft)
    coef = np.where(act, a[..., None] * omega, np.where(tok, a[..., None], 0.0))
    return coef, omega


@given(seed=st.integers(0, 10_000), step=st.sampled_from([0, 1, 7, 15, 16, 40]),
       steps=st.sampled_from([60, 9]))
def test_credit_matches_the_reference(patched, seed, step, steps):
    credit_fn, seen = patched
    cfg = _cfg(train_steps=steps, clip_d=1.0, tau=0.7)
    batch = random_rollout(seed, B // G, G, T, A)
    rng = np.random.default_rng(seed)
    a = np.where(batch.turn_mask, rng.normal(size=(B, T)), 0.0).astype(np.float32)
    shift = rng.normal(0, 1.0, (B, T, A)).astype(np.float32)
    params = {"a": jnp.asarray(a), "shift": jnp.asarray(shift)}
    c = jax.device_get(credit_fn(cfg)(params, batch, jax.random.key(0), jnp.int32(step),
                                      {"it": 0, "n": 10}))
    tok = np.asarray(batch.token_mask)
    act = tok & np.asarray(batch.action_mask)
    delta = np.where(tok, shift, 0.0)
    eta = _ref_eta(cfg.factor, step + 1)
    coef, omega = _ref_coef(a, delta, tok, act, eta, 1.0, 0.7)
    np.testing.assert_allclose(c.coef, coef, rtol=1e-5, atol=1e-6)
    # per action the credit is conserved: mean_j C over the action tokens = A_t
    length = act.sum(-1)
    real = length > 0
    np.testing.assert_allclose((c.coef * act).sum(-1)[real] / length[real], a[real],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.metrics["factor/eta"], eta, rtol=1e-6, atol=1e-7)
    assert float(c.metrics["asct/aux_tokens"]) == 5.0
    assert seen["rule"] == "agentuct" and seen["chat"] == "chat:chat:ENV"
    assert c.state == {"it": 1, "n": 11}                  # the search's cache, iterated
    rtg = np.cumsum(np.asarray(batch.rewards)[:, ::-1], axis=1)[:, ::-1] * batch.turn_mask
    np.testing.assert_allclose(c.value_targets, rtg, rtol=1e-5, atol=1e-6)


def test_without_the_cache_the_state_passes_through(patched):
    credit_fn, seen = patched
    batch = random_rollout(3, B // G, G, T, A, action_mask=False)  # candidates: all action
    params = {"a": jnp.ones((B, T)), "shift": jnp.zeros((B, T, A))}
    c = credit_fn(_cfg(cache=False))(params, batch, jax.random.key(0), jnp.int32(0),
                                     {"it": 0, "n": 0})
    assert seen["cache"] is None and c.state == {"it": 0, "n": 0}
    # Delta = 0: the weights are 1, C = A_t = 1 on every token
    np.testing.assert_allclose(c.coef, np.where(batch.token_mask, 1.0, 0.0), atol=1e-6)
    assert float(c.metrics["factor/weight_spread"]) == pytest.approx(0.0, abs=1e-6)


def test_eta_schedule_by_hand():
    """60 steps under scale_schedules: D = round(39 * 60 / 150) = 16 (eta_1 = eta0, eta_16 =
    eta0 / 16, eta_17 = 0); 3 steps: D = 1, the teacher on at step 1 only."""
    sched = af.Schedule.of(_cfg().factor, critic=False)
    got = [float(sched.eta(k, 0.7)) for k in (1, 2, 16, 17)]
    np.testing.assert_allclose(got, [0.7, 0.7 * 15 / 16, 0.7 / 16, 0.0], rtol=1e-6)
    sched = af.Schedule.of(_cfg(train_steps=3).factor, critic=False)
    np.testing.assert_allclose([float(sched.eta(k, 0.7)) for k in (1, 2)], [0.7, 0.0])


def test_unscaled_eta_schedule_starts_at_step_one():
    sched = af.Schedule.of(_cfg(scale_schedules=False).factor, critic=False)
    np.testing.assert_allclose([float(sched.eta(k, 0.7)) for k in (1, 39, 40)],
                               [0.7, 0.7 / 39, 0.0], rtol=1e-6)


def test_allocation_metrics_by_hand():
    """Actions of 3, 1, 0 and 2 tokens: multi-token share 2 / 3; spread = mean |omega - 1|
    over the 5 tokens of the multi-token actions; the conservation error of (1.5, 0.5, 1)
    is 0, of (1.2, 1.2) 0.2."""
    mask = np.zeros((1, 4, 3), bool)
    mask[0, 0, :3] = mask[0, 1, :1] = mask[0, 3, :2] = True
    w = np.zeros((1, 4, 3), np.float32)
    w[0, 0, :3], w[0, 1, 0], w[0, 3, :2] = (1.5, 0.5, 1.0), 7.0, (1.2, 1.2)
    m = jax.device_get(af.allocation_metrics(jnp.asarray(w), jnp.asarray(mask),
                                             jnp.float32(0.3)))
    assert set(m) == {"factor/eta", "factor/multi_token_share", "factor/weight_spread",
                      "factor/conservation_err_max"}
    np.testing.assert_allclose(m["factor/eta"], 0.3)
    np.testing.assert_allclose(m["factor/multi_token_share"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["factor/weight_spread"], (0.5 + 0.5 + 0 + 0.2 + 0.2) / 5,
                               rtol=1e-6)
    np.testing.assert_allclose(m["factor/conservation_err_max"], 6.0, rtol=1e-6)  # the 7.0
    empty = af.allocation_metrics(jnp.zeros((1, 2, 2)), jnp.zeros((1, 2, 2), bool), 0.0)
    assert all(float(v) == 0.0 for v in empty.values())        # no division by zero


def test_config_and_method_record(patched):
    c = base.get_config()
    c.factor.tau = 0.0
    with pytest.raises(ConfigError, match=r"^factor\.tau: .*allowed: \(0\.0, inf\)$"):
        af.asct_factor_config(c)
    c = base.get_config()
    c.asct.c_exp = -1.0
    with pytest.raises(ConfigError, match=r"^asct\.c_exp: "):
        af.asct_factor_config(c)
    m = af.ASCT_FACTOR
    assert m.name == "asct_factor" and m.protocol is ASCT and m.restores_states_in_step
    assert m.make_config is af.asct_factor_config and af.METHODS == (m,)
    assert m.update_state is installs_credit_state
    assert m.init_state(_cfg(), CTX, None, None) == ("cache of", "ENV", "EP")
    assert m.init_state(_cfg(cache=False), CTX, None, None) is None
