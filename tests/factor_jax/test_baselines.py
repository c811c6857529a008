"""factor_jax.baselines: SERL's credit (`_serl`) against a NumPy reference of
docs/methods.md (SERL; GRPO over step samples), with a stand-in teacher so no model is
compiled: the teacher reads the method state's copy (joined with the student's frozen
part under LoRA), it is not run at lam = 0, the prompted rows, lam_k, the loss inputs and
metrics; the teacher's state (`_serl_init`, `_serl_update`) on LoRA-form parameters;
`serl_schedules` scaled; `serl_config`'s one-line errors; the method records
(SERL_PROTOCOL, GRPO_EXTENDED). The kernels and the policy loss: test_serl.py."""
import dataclasses
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.infra.checks import ConfigError
from asct_jax.rl import methods as rl_methods
from asct_jax.rl.credit import CreditContext
from factor_jax import baselines
from factor_jax.baselines import SerlConfig
from tests.helpers.rollouts import random_rollout

G, B, T, A, F = 2, 4, 3, 3, 2
PAD = 0
CTX = CreditContext(policy=types.SimpleNamespace(pad_id=PAD), env=None, env_params=None,
                    group_size=G)


def _sc(**kw):
    base = dict(lam0=0.5, decay_steps=50, resync_every=10, clip=0.2, train_steps=20)
    return SerlConfig(**{**base, **kw})


def _batch(seed):
    return random_rollout(seed, num_groups=B // G, group_size=G, turns=T, action_len=A,
                          feedback_len=F, pad_id=PAD)


def _ref_grpo(batch, stats, penalty):
    """GRPO over step samples (docs/methods.md): s = R(tau) - p, (s - mean X) / (std X + 1e-6)."""
    m = np.asarray(batch.turn_mask)
    p = np.asarray(batch.penalties, np.float64) if penalty == "step" else np.zeros((B, T))
    r = np.asarray(batch.rewards, np.float64) + p                     # the environment's r_t
    ret = (r * m).sum(1)
    s = ret[:, None] - p
    out = np.zeros((B, T))
    for g in range(B // G):
        eps = range(g * G, (g + 1) * G)
        xs = ([s[j, t] for j in eps for t in range(T) if m[j, t]] if stats == "steps"
              else [ret[j] for j in eps])
        mean, std = (0.0, 1.0) if len(xs) == 1 else (np.mean(xs), np.std(xs, ddof=1))
        for j in eps:
            out[j] = np.where(m[j], (s[j] - mean) / (std + 1e-6), 0.0)
    return out


def _teacher_calls():
    """A stand-in teacher_log_probs: pi_old shifted by the teacher parameters' "shift"
    (+ the frozen part's "base" under LoRA); counts the calls that ran (not traced)."""
    calls = []

    def teacher(ctx, params, batch, prompt):
        assert prompt == "serl"
        shift = params[0]["shift"] + params[1]["base"] if isinstance(params, tuple) \
            else params["shift"]
        jax.debug.callback(lambda: calls.append(1))
        return batch.logp_old + shift
    return teacher, calls


@pytest.fixture(scope="module")
def credits():
    """sc -> the jitted SERL credit with the stand-in teacher (one compile per config and
    parameter structure), and the list of the teacher's calls."""
    cache = {}
    mp = pytest.MonkeyPatch()
    teacher, calls = _teacher_calls()
    mp.setattr(baselines, "teacher_log_probs", teacher)

    def get(sc):
        if sc not in cache:
            cache[sc] = jax.jit(baselines._serl(sc, CTX))
        return cache[sc], calls
    yield get
    mp.undo()


@given(seed=st.integers(0, 10_000), step=st.sampled_from([0, 3, 30, 49, 60]),
       kind=st.sampled_from([("steps", "step"), ("episodes", "reward")]))
def test_serl_credit_matches_the_reference(credits, seed, step, kind):
    stats, penalty = kind
    sc = _sc(stats=stats, penalty=penalty)
    credit_fn, calls = credits(sc)
    batch = _batch(seed)
    rng = np.random.default_rng(seed + 1)
    shift = np.where(batch.token_mask, rng.normal(0, 0.4, (B, T, A)), 0.0).astype(np.float32)
    student = {"shift": jnp.asarray(rng.normal(size=(B, T, A)), jnp.float32)}
    mstate = {"teacher": {"shift": jnp.asarray(shift)}}
    n0 = len(calls)
    c = jax.device_get(credit_fn(student, batch, jax.random.key(0), jnp.int32(step), mstate))
    jax.effects_barrier()
    lam = 0.5 * max(0.0, 1 - step / 50)                       # lam_k, k = step + 1
    a = _ref_grpo(batch, stats, penalty)
    tok, m = np.asarray(batch.token_mask), np.asarray(batch.turn_mask)
    rows = m & np.any(np.asarray(batch.feedback) != PAD, axis=-1)
    reweight = tok & np.asarray(batch.action_mask) & rows[..., None]
    teacher = np.asarray(batch.logp_old) + shift if lam > 0 else np.asarray(batch.logp_old)
    delta = np.where(tok, teacher - np.asarray(batch.logp_old), 0.0)
    w = np.clip(np.exp(np.clip(np.sign(a)[..., None] * delta, -20, 20)), 0.8, 1.2)
    coef = np.where(reweight, a[..., None] * ((1 - lam) + lam * w), np.where(tok, a[..., None], 0))
    np.testing.assert_allclose(c.loss_inputs["advantage"], a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c.coef, coef, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c.loss_inputs["teacher_logp"], teacher, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(c.loss_inputs["reweight"], reweight)
    np.testing.assert_allclose(c.loss_inputs["lambda"], lam, atol=1e-7)
    assert len(calls) - n0 == (1 if lam > 0 else 0)           # lam = 0: no teacher pass
    np.testing.assert_allclose(c.metrics["serl/lambda"], lam, atol=1e-7)
    np.testing.assert_allclose(c.metrics["serl/prompted_rows"], rows.sum() / m.sum())
    assert c.metrics["aux_tokens"] == 0 and c.metrics["env_calls"] == 0
    rtg = np.cumsum((np.asarray(batch.rewards) * m)[:, ::-1], axis=1)[:, ::-1] * m
    np.testing.assert_allclose(c.value_targets, rtg, rtol=1e-5, atol=1e-6)


def test_lora_teacher_is_the_adapters_joined_with_the_frozen_base(credits):
    """LoRA (join_params form (adapters, base)): the state holds a copy of the adapters
    only; the teacher runs on (teacher adapters, the student's base); a re-sync copies the
    student's adapters."""
    sc = _sc()
    rng = np.random.default_rng(5)
    adapters = {"shift": jnp.asarray(rng.normal(0, 0.3, (B, T, A)), jnp.float32)}
    base = {"base": jnp.full((B, T, A), 0.25, jnp.float32)}
    state = baselines._serl_init(sc, CTX, (adapters, base), jax.random.key(0))
    assert set(state) == {"teacher"} and state["teacher"].keys() == {"shift"}
    np.testing.assert_array_equal(state["teacher"]["shift"], adapters["shift"])
    assert state["teacher"]["shift"] is not adapters["shift"]          # a copy
    student = ({"shift": jnp.zeros((B, T, A))}, base)                  # trained away
    credit_fn, _ = credits(sc)
    batch = _batch(1)
    c = credit_fn(student, batch, jax.random.key(0), jnp.int32(0), state)
    want = np.asarray(batch.logp_old) + np.asarray(adapters["shift"]) + 0.25
    np.testing.assert_allclose(c.loss_inputs["teacher_logp"], want, rtol=1e-6, atol=1e-7)
    upd = lambda s, step: baselines._serl_update(  # noqa: E731
        sc, CTX, state, types.SimpleNamespace(params=student, step=jnp.int32(step)))
    kept, m_kept = upd(state, 3)
    synced, m_synced = upd(state, 9)                                  # after the 10th step
    np.testing.assert_array_equal(kept["teacher"]["shift"], adapters["shift"])
    np.testing.assert_array_equal(synced["teacher"]["shift"], 0.0)
    assert (float(m_kept["serl_resync"]), float(m_synced["serl_resync"])) == (0.0, 1.0)
    assert synced["teacher"].keys() == {"shift"}                       # no base in the state


def test_trainable_and_join_like_round_trip():
    full, lora = {"w": 1}, ({"a": 1}, {"b": 2}, {"c": 3})
    assert baselines._trainable(full) is full and baselines._trainable(lora) is lora[0]
    assert baselines._join_like({"w": 9}, full) == {"w": 9}
    assert baselines._join_like({"a": 9}, lora) == ({"a": 9}, {"b": 2}, {"c": 3})


@pytest.mark.parametrize("kw, want", [
    (dict(), (50, 10)),                                         # SERL's, unscaled
    (dict(scale_schedules=True, train_steps=300), (100, 20)),   # x 300 / 150
    (dict(scale_schedules=True, train_steps=75), (25, 5)),
    (dict(scale_schedules=True, train_steps=3), (1, 1)),        # at least 1 step
    (dict(scale_schedules=True, decay_steps=0, train_steps=300), (0, 20)),   # no decay stays
])
def test_serl_schedules(kw, want):
    assert baselines.serl_schedules(_sc(**kw)) == want


def _config(**serl):
    fields = dict(lam0=0.5, decay_steps=50, resync_every=10, clip=0.2)
    return ml_collections.ConfigDict({"train": {"steps": 40}, "serl": {**fields, **serl}})


def test_serl_config_reads_the_section_and_train_steps():
    sc = baselines.serl_config(_config(clip=0.3, stats="episodes"))
    assert sc == _sc(clip=0.3, stats="episodes", train_steps=40)
    assert (sc.scale_schedules, sc.teacher_prompt, sc.penalty) == (False, "serl", "step")


@pytest.mark.parametrize("field, value, allowed", [
    ("lam0", 1.5, "[0.0, 1.0]"), ("decay_steps", -1, "int in [0, inf)"),
    ("resync_every", 0, "int in [1, inf)"), ("clip", -0.1, "[0.0, inf)"),
    ("stats", "turns", "steps, episodes"), ("penalty", "tokens", "step, reward"),
    ("teacher_prompt", "hindsight", "serl, appended"), ("scale_schedules", "yes", "True, False"),
    ("scale_schedules", 1, "True, False"),                   # a flag takes a bool
])
def test_bad_serl_field_is_a_one_line_error_naming_it(field, value, allowed):
    with pytest.raises(ConfigError) as e:
        baselines.serl_config(_config(**{field: value}))
    msg = str(e.value)
    assert msg.startswith(f"serl.{field}: ") and msg.endswith(f"allowed: {allowed}")
    assert "\n" not in msg


def test_method_records():
    verl = rl_methods.VERL
    assert baselines.SERL_PROTOCOL == dataclasses.replace(verl, kl_coef=0.0, kl_clamp=0.0)
    assert verl.kl_coef > 0 and verl.kl_clamp > 0
    s = baselines.SERL
    assert s.name == "serl" and s.protocol is baselines.SERL_PROTOCOL
    assert s.make_config is baselines.serl_config
    assert s.make_policy_loss is baselines.serl_policy_loss
    assert (s.init_state, s.update_state) == (baselines._serl_init, baselines._serl_update)
    ext, grpo = baselines.GRPO_EXTENDED, rl_methods.GRPO
    assert ext.name == "grpo_extended"
    assert dataclasses.replace(ext, name="grpo") == grpo               # GRPO but its name
    assert [m.name for m in baselines.METHODS] == ["serl", "grpo_extended"]
