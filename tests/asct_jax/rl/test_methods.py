"""asct_jax.rl.methods: the four baseline credits (ppo_return, ppo_gae, grpo, gigpo) on
random rollouts against plain NumPy references of docs/methods.md (Baselines): returns to
go, GAE, GRPO over step samples and GiGPO's episode + anchor-state terms, each with the
invalid-action penalty placed "step" or "reward" (`group_rewards`); the coefficients the
turn's advantage on its tokens, the value targets; the configs (defaults, one-line errors
naming the field) and the method records. Eager calls: no model, no environment."""
import ml_collections
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.infra.checks import ConfigError
from asct_jax.rl import methods as M
from asct_jax.rl.credit import CreditContext
from asct_jax.rl.protocol import SUBSTRATE
from experiments.configs import base
from tests.helpers.rollouts import random_rollout

G, NG, T, A = 3, 2, 4, 2
B = G * NG
CTX = CreditContext(policy=None, env=None, env_params=None, group_size=G)
EPS = 1e-6


def _batch(seed):
    """Observations of one token in {1, 2}: anchor states recur within and across turns."""
    return random_rollout(seed, NG, G, T, A, obs_len=1, obs_values=2, penalty=0.3)


def _np(batch):
    m = np.asarray(batch.turn_mask)
    return (m, np.asarray(batch.rewards, np.float64), np.asarray(batch.penalties, np.float64),
            np.asarray(batch.values, np.float64), np.asarray(batch.token_mask))


def _rtg(r, m, gamma=1.0):
    g = np.zeros_like(r)
    for t in reversed(range(r.shape[1])):
        nxt = g[:, t + 1] if t + 1 < r.shape[1] else 0.0
        g[:, t] = m[:, t] * (r[:, t] + gamma * nxt)
    return g


def _norm(x, xs, use_std, lone):
    """N(x; X): x - mean X (/ (std X + eps), ddof 1); a set of <= 1 sample: mean 0 and
    std 1 (`lone` keeps x, else 0)."""
    if len(xs) <= 1:
        return (x if lone else 0.0) / ((1 + EPS) if use_std else 1.0)
    d = x - np.mean(xs)
    return d / (np.std(xs, ddof=1) + EPS) if use_std else d


def _placed(batch, penalty):
    """(r_t the environment's, p_t): the penalty off the step's own score, or in r_t."""
    m, r, p, _, _ = _np(batch)
    return (r + p, p) if penalty == "step" else (r, np.zeros_like(p))


def _ref_episode_term(batch, penalty, stats, use_std):
    m = np.asarray(batch.turn_mask)
    r, p = _placed(batch, penalty)
    ret = (r * m).sum(1)
    out = np.zeros(m.shape)
    for g in range(NG):
        eps_ = range(g * G, (g + 1) * G)
        xs = ([ret[j] - p[j, t] for j in eps_ for t in range(T) if m[j, t]] if stats == "steps"
              else [ret[j] for j in eps_ if m[j].any()])
        for i in eps_:
            for t in np.flatnonzero(m[i]):
                out[i, t] = _norm(ret[i] - p[i, t], xs, use_std, lone=True)
    return out


def _ref_gigpo(batch, penalty, gamma, omega, mode, stats):
    m = np.asarray(batch.turn_mask)
    obs = np.asarray(batch.obs)
    use_std = mode == "mean_std_norm"
    r, p = _placed(batch, penalty)
    step_ret = _rtg(r, m, gamma) - p                            # R_t - p_t
    a_s = np.zeros(m.shape)
    for i, t in zip(*np.nonzero(m)):
        g = i // G
        xs = [step_ret[j, u] for j in range(g * G, (g + 1) * G) for u in range(T)
              if m[j, u] and np.array_equal(obs[j, u], obs[i, t])]
        a_s[i, t] = _norm(step_ret[i, t], xs, use_std, lone=False)
    return (_ref_episode_term(batch, penalty, stats, use_std) + omega * a_s) * m


def _check(credit, adv, targets, batch):
    tok = np.asarray(batch.token_mask)
    np.testing.assert_allclose(credit.coef, np.where(tok, adv[..., None], 0.0), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(credit.value_targets, targets, rtol=1e-5, atol=1e-5)
    assert float(credit.metrics["aux_tokens"]) == 0 and float(credit.metrics["env_calls"]) == 0


def _credit(method, section, seed, **fields):
    cfg = method.make_config(ml_collections.ConfigDict({section: fields}))
    batch = _batch(seed)
    return method.make_credit(cfg, CTX)(None, batch, None, 0, None), batch


def test_group_rewards_places_the_penalty():
    batch = _batch(0)
    _, r, p, _, _ = _np(batch)
    assert p.any()
    got_r, got_p = M.group_rewards(batch, "step")
    np.testing.assert_allclose(got_r, r + p, rtol=1e-6)
    np.testing.assert_array_equal(got_p, p.astype(np.float32))
    got_r, got_p = M.group_rewards(batch, "reward")
    assert got_r is batch.rewards and got_p is None


@given(seed=st.integers(0, 10_000), baseline=st.sampled_from(["critic", "none"]))
def test_ppo_return(seed, baseline):
    credit, batch = _credit(M.PPO_RETURN, "ppo", seed, return_baseline=baseline)
    m, r, _, v, _ = _np(batch)
    g = _rtg(r, m)
    _check(credit, g - v * m if baseline == "critic" else g, g, batch)


@given(seed=st.integers(0, 10_000))
def test_ppo_gae(seed):
    credit, batch = _credit(M.PPO_GAE, "ppo", seed, gamma=0.9, gae_lambda=0.8)
    m, r, _, v, _ = _np(batch)
    a = np.zeros(m.shape)
    for t in reversed(range(T)):
        v_next = m[:, t + 1] * v[:, t + 1] if t + 1 < T else 0.0
        a_next = m[:, t + 1] * a[:, t + 1] if t + 1 < T else 0.0
        a[:, t] = m[:, t] * (r[:, t] + 0.9 * v_next - v[:, t] + 0.9 * 0.8 * a_next)
    _check(credit, a, (a + v) * m, batch)


@given(seed=st.integers(0, 10_000),
       kind=st.sampled_from([("steps", "step"), ("episodes", "step"), ("steps", "reward")]))
def test_grpo(seed, kind):
    stats, penalty = kind
    credit, batch = _credit(M.GRPO, "grpo", seed, stats=stats, penalty=penalty)
    m, r, _, _, _ = _np(batch)
    _check(credit, _ref_episode_term(batch, penalty, stats, use_std=True), _rtg(r, m), batch)


@given(seed=st.integers(0, 10_000), kind=st.sampled_from([
    ("mean_norm", "steps", "step"), ("mean_std_norm", "episodes", "reward"),
    ("mean_std_norm", "steps", "step")]))
def test_gigpo(seed, kind):
    mode, stats, penalty = kind
    credit, batch = _credit(M.GIGPO, "gigpo", seed, gamma=0.5, omega=0.7, mode=mode,
                            episode_stats=stats, penalty=penalty)
    m, r, _, _, _ = _np(batch)
    ref = _ref_gigpo(batch, penalty, 0.5, 0.7, mode, stats)
    _check(credit, ref, _rtg(r, m), batch)


def test_grpo_config_defaults_without_the_section():
    assert M.grpo_config(ml_collections.ConfigDict({})) == M.GRPOConfig("steps", "step")
    cfg = M.grpo_config(ml_collections.ConfigDict({"grpo": {"stats": "episodes"}}))
    assert cfg == M.GRPOConfig("episodes", "step")
    cfg = M.GIGPO.make_config(base.get_config())
    assert cfg == M.GiGPOConfig(0.95, 1.0, "mean_norm", "steps", "step")
    assert M.PPO_RETURN.make_config(base.get_config()) == M.ReturnConfig("none")


@pytest.mark.parametrize("method, field, value, allowed", [
    (M.PPO_RETURN, "ppo.return_baseline", "mean", "critic, none"),
    (M.PPO_GAE, "ppo.gamma", 1.5, "[0.0, 1.0]"),
    (M.PPO_GAE, "ppo.gae_lambda", -0.1, "[0.0, 1.0]"),
    (M.GRPO, "grpo.stats", "turns", "steps, episodes"),
    (M.GRPO, "grpo.penalty", "tokens", "step, reward"),
    (M.GIGPO, "gigpo.mode", "std_norm", "mean_norm, mean_std_norm"),
    (M.GIGPO, "gigpo.omega", -1.0, "[0.0, inf)"),
    (M.GIGPO, "gigpo.episode_stats", "turns", "steps, episodes"),
])
def test_bad_field_is_a_one_line_error_naming_it(method, field, value, allowed):
    c = base.get_config()
    section, name = field.split(".")
    c[section][name] = value
    with pytest.raises(ConfigError) as e:
        method.make_config(c)
    msg = str(e.value)
    assert msg.startswith(f"{field}: ") and msg.endswith(f"allowed: {allowed}")
    assert "\n" not in msg


def test_method_records():
    assert [m.name for m in M.METHODS] == ["ppo_return", "ppo_gae", "grpo", "gigpo"]
    assert M.PPO_RETURN.protocol is M.ASCT and M.PPO_GAE.protocol is SUBSTRATE
    assert M.GRPO.protocol is M.VERL and M.GIGPO.protocol is M.VERL
    assert M.RETURN_BASELINES == ("critic", "none")
    assert M.PENALTY_PLACEMENTS == ("step", "reward")
    for m in M.METHODS:
        assert m.init_state is None and m.update_state is None   # stateless
