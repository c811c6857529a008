"""Tests for asct_jax.rl.group_advantages: GRPO per episode and over step samples, GiGPO,
the invalid-action penalty; golden values by hand and NumPy loops."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asct_jax.rl import advantages as adv
from asct_jax.rl import group_advantages as gadv


def test_grpo_by_hand():
    g = jnp.array([1.0, 3.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    # group_size 4: groups [1,3,0,0] (mean 1) and [2,4,6,8] (mean 5).
    std0 = np.sqrt((0 + 4 + 1 + 1) / 3)  # sample std of group 0
    std1 = np.sqrt((9 + 1 + 1 + 9) / 3)
    expected = np.array([0, 2, -1, -1, -3, -1, 1, 3]) / np.repeat([std0, std1], 4)
    np.testing.assert_allclose(gadv.grpo_advantages(g, 4, eps=0.0), expected, rtol=1e-6)
    np.testing.assert_allclose(gadv.grpo_advantages(g, 4, normalise_std=False),
                               [0, 2, -1, -1, -3, -1, 1, 3])
    pop = gadv.grpo_advantages(g, 4, eps=0.0, ddof=0)
    np.testing.assert_allclose(np.std(np.asarray(pop).reshape(2, 4), axis=1), [1, 1], rtol=1e-6)
    # Equal returns or a group of one: advantage 0, never NaN.
    np.testing.assert_array_equal(gadv.grpo_advantages(jnp.ones(4), 2), jnp.zeros(4))
    np.testing.assert_array_equal(gadv.grpo_advantages(jnp.arange(3.0), 1), jnp.zeros(3))
    with pytest.raises(ValueError):
        gadv.grpo_advantages(g, 3)


# ------------------------------------------------------------------------------- GiGPO
# Jitted (one compile per shape) for the hypothesis tests: much faster than op-by-op.
_gigpo = jax.jit(gadv.gigpo_advantages,
                 static_argnames=("group_size", "mode", "episode_stats"))
_MODES = st.sampled_from(list(gadv.GIGPO_MODES))
_STATS = st.sampled_from(list(gadv.GIGPO_EPISODE_STATS))


def _returns_numpy(r, m, gamma):
    """R_t = r_t + gamma R_{t+1} over the real turns, 0 elsewhere."""
    ret = np.zeros(r.shape)
    for i in range(r.shape[0]):
        acc = 0.0
        for k in reversed(range(r.shape[1])):
            if m[i, k]:
                acc = r[i, k] + gamma * acc
                ret[i, k] = acc
    return ret


def _gigpo_numpy(r, obs, m, group_size, gamma, omega, mode, episode_stats, eps=1e-6,
                 p=None):
    """verl-agent's layout in explicit loops, float64: one row per real turn (i, t) with
    its group, its copy of the episode's return R(tau_i) - p_{i,t}, its step return
    R_t - p_{i,t} (the penalty after discounting) and its observation; statistics over
    rows ("steps") or over distinct episodes' R(tau) ("episodes")."""
    r, obs, m = np.asarray(r, np.float64), np.asarray(obs), np.asarray(m)
    b, t = r.shape
    p = np.zeros((b, t)) if p is None else np.where(m, p, 0.0)
    ret = _returns_numpy(r, m, gamma) - p
    ep_ret = [sum(r[i, k] for k in range(t) if m[i, k]) for i in range(b)]
    rows = [(i, k) for i in range(b) for k in range(t) if m[i, k]]
    score = {(i, k): ep_ret[i] - p[i, k] for i, k in rows}

    def norm(x, xs, singleton_mean):
        if len(xs) == 1:
            mean, std = singleton_mean, 1.0
        else:
            mean, std = np.mean(xs), np.std(xs, ddof=1)
        return x - mean if mode == "mean_norm" else (x - mean) / (std + eps)

    out = np.zeros((b, t))
    for i, k in rows:
        peers = [(j, k2) for j, k2 in rows if j // group_size == i // group_size]
        sample = ([score[q] for q in peers] if episode_stats == "steps"
                  else [ep_ret[j] for j in sorted({j for j, _ in peers})])
        a_e = norm(score[i, k], sample, 0.0)
        anchor = [ret[j, k2] for j, k2 in peers if np.array_equal(obs[j, k2], obs[i, k])]
        out[i, k] = a_e + omega * norm(ret[i, k], anchor, ret[i, k])
    return out


def _gigpo_batch(seed, num_groups, group_size, t, o, vocab, min_len=0):
    """Random rewards (nan where masked), a ragged prefix mask, obs from a small vocab."""
    rng = np.random.default_rng(seed)
    b = num_groups * group_size
    lengths = rng.integers(min_len, t + 1, size=b)
    mask = np.arange(t)[None, :] < lengths[:, None]
    rewards = np.where(mask, rng.normal(size=(b, t)), np.nan).astype(np.float32)
    obs = rng.integers(0, vocab, size=(b, t, o)).astype(np.int32)
    return rewards, obs, mask


def _penalties(seed, m, p=0.1):
    """p on about a third of the real turns (invalid actions), nan where no turn happened."""
    rng = np.random.default_rng(seed + 2)
    return np.where(m, p * (rng.random(m.shape) < 0.35), np.nan).astype(np.float32)


def _anchor_groups(obs, m, group_size):
    """{(group, obs bytes): [(i, t), ...]} over real turns."""
    groups = {}
    for i, k in zip(*np.nonzero(m)):
        groups.setdefault((i // group_size, obs[i, k].tobytes()), []).append((i, k))
    return groups


def test_gigpo_by_hand():
    # 2 groups of G = 2, T = 3, O = 2, gamma = 0.5. Observations A=(1,1) B=(2,2) C=(3,3)
    # D=(1,2) (one token off A); X marks turns that did not happen (obs A, reward 9).
    a, b_, c_, d_ = (1, 1), (2, 2), (3, 3), (1, 2)
    obs = jnp.array([[a, b_, a],    # ep 0: A at t=0 and t=2 (repeated across turns)
                     [a, c_, b_],   # ep 1: A, B shared with ep 0 (across episodes)
                     [a, b_, a],    # ep 2: last turn X; B is not shared across groups
                     [a, d_, a]],   # ep 3: last turn X
                    jnp.int32)
    r = jnp.array([[0., 1., 2.], [1., 0., 4.], [1., 1., 9.], [0., 2., 9.]])
    m = jnp.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0]], bool)
    # R_t (gamma 0.5): ep0 [0 + .5*2, 1 + .5*2, 2] = [1, 2, 2]
    #                  ep1 [1 + .5*2, 0 + .5*4, 4] = [2, 2, 4]
    #                  ep2 [1 + .5*1, 1] = [1.5, 1]     ep3 [0 + .5*2, 2] = [1, 2]
    # R(tau) = 3, 5 | 2, 2. Equal lengths, so the step samples' mean is the episodes' one:
    # centred -1, +1 | 0, 0. Step samples (3, 3, 3, 5, 5, 5): sample std sqrt(6 / 5).
    # Group 0 anchors: A = {(0,0): 1, (0,2): 2, (1,0): 2}: mean 5/3, centred -2/3, 1/3, 1/3,
    #                      sample std sqrt((4 + 1 + 1) / 9 / 2) = 1/sqrt3;
    #                  B = {(0,1): 2, (1,2): 4}: mean 3, centred -1, +1, std sqrt2;
    #                  C = {(1,1)}: singleton, A^S = 0.
    # Group 1 anchors: A = {(2,0): 1.5, (3,0): 1}: mean 1.25, centred +-1/4, std sqrt(1/8);
    #                  B (not shared across groups) and D: singletons. X turns: 0.
    mean_norm = gadv.gigpo_advantages(r, obs, m, 2, gamma=0.5)
    np.testing.assert_allclose(mean_norm, [[-1 - 2 / 3, -1 - 1, -1 + 1 / 3],
                                           [1 + 1 / 3, 1 + 0, 1 + 1],
                                           [0.25, 0, 0],
                                           [-0.25, 0, 0]], rtol=1e-6, atol=1e-6)
    s2, s3, e = np.sqrt(2), np.sqrt(3), np.sqrt(1.2)
    std = gadv.gigpo_advantages(r, obs, m, 2, gamma=0.5, omega=0.5, mode="mean_std_norm",
                                eps=1e-12)
    np.testing.assert_allclose(std, [[-1 / e + 0.5 * (-2 / s3), -1 / e + 0.5 * (-1 / s2),
                                      -1 / e + 0.5 / s3],
                                     [1 / e + 0.5 / s3, 1 / e + 0, 1 / e + 0.5 / s2],
                                     [0.5 / s2, 0, 0],
                                     [-0.5 / s2, 0, 0]], rtol=1e-5, atol=1e-6)
    assert std.dtype == jnp.float32
    # Per-episode statistics: the same means, the std of (3, 5) is sqrt2.
    per_episode = gadv.gigpo_advantages(r, obs, m, 2, gamma=0.5, omega=0.5,
                                        mode="mean_std_norm", episode_stats="episodes",
                                        eps=1e-12)
    np.testing.assert_allclose(per_episode - std, np.array([[-1], [1], [0], [0]])
                               * (1 / s2 - 1 / e) * m, rtol=1e-5, atol=1e-6)


def test_gigpo_unequal_lengths_weigh_episodes_by_their_turns():
    # G = 2, T = 3, gamma = 0.5. ep 0: 3 turns, obs A, B, A (A revisited), r = 0, 0, 1;
    # ep 1: 1 turn, obs A, r = 0; its padding has obs A and nan rewards (never read).
    A, B = (1, 1), (2, 2)
    obs = jnp.array([[A, B, A], [A, A, A]], jnp.int32)
    r = jnp.array([[0., 0., 1.], [0., np.nan, np.nan]])
    m = jnp.array([[1, 1, 1], [1, 0, 0]], bool)
    # R(tau) = 1, 0. Step samples (1, 1, 1, 0): mean 3/4, centred 1/4 | -3/4,
    #   sample std sqrt((3/16 + 9/16) / 3) = 1/2  ->  1/2 | -3/2.
    # Episode samples (1, 0): mean 1/2, centred +-1/2, std 1/sqrt2  ->  +-1/sqrt2.
    # R_t: ep 0 [1/4, 1/2, 1], ep 1 [0]. Anchor A = {(0,0): 1/4, (0,2): 1, (1,0): 0}:
    #   mean 5/12, centred -1/6, 7/12, -5/12 (sum 0), std sqrt(78/144 / 2) = sqrt39 / 12;
    #   B = {(0,1)}: singleton, A^S = 0.
    a_s = np.array([[-1 / 6, 0, 7 / 12], [-5 / 12, 0, 0]])
    z = np.sqrt(39) / 12
    mf = np.asarray(m, np.float64)
    cases = {("mean_norm", "steps"): (np.array([[0.25], [-0.75]]), a_s),
             ("mean_norm", "episodes"): (np.array([[0.5], [-0.5]]), a_s),
             ("mean_std_norm", "steps"): (np.array([[0.5], [-1.5]]), a_s / z),
             ("mean_std_norm", "episodes"): (np.array([[1], [-1]]) / np.sqrt(2), a_s / z)}
    for (mode, stats), (a_e, step) in cases.items():
        out = gadv.gigpo_advantages(r, obs, m, 2, gamma=0.5, mode=mode, episode_stats=stats,
                                    eps=1e-12)
        np.testing.assert_allclose(out, (a_e + step) * mf, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{mode}, {stats}")
    # The default is the authors' setting: mean_norm over step samples.
    np.testing.assert_allclose(gadv.gigpo_advantages(r, obs, m, 2, gamma=0.5),
                               (cases["mean_norm", "steps"][0] + a_s) * mf, atol=1e-6)


def test_gigpo_singleton_sets():
    # One sample in E(g) (G = 1, one turn): mean 0 and std 1, so A^E = R(tau) (their
    # convention), / (1 + eps) under mean_std_norm; the singleton anchor gives A^S = 0.
    obs, r = jnp.ones((1, 2, 1), jnp.int32), jnp.array([[0.7, np.nan]])
    m = jnp.array([[True, False]])
    for mode, want in (("mean_norm", 0.7), ("mean_std_norm", 0.7 / (1 + 1e-6))):
        for stats in gadv.GIGPO_EPISODE_STATS:
            out = gadv.gigpo_advantages(r, obs, m, 1, mode=mode, episode_stats=stats)
            np.testing.assert_allclose(out, [[want, 0.0]], rtol=1e-6)
    # G = 1, two turns: two step samples of the same return (A^E = 0), but one episode
    # sample (A^E = R). Distinct observations: both anchors singletons.
    obs2 = jnp.array([[[1], [2]]], jnp.int32)
    r2, m2 = jnp.array([[0.3, 0.4]]), jnp.array([[True, True]])
    for mode in gadv.GIGPO_MODES:
        np.testing.assert_allclose(gadv.gigpo_advantages(r2, obs2, m2, 1, mode=mode),
                                   [[0.0, 0.0]], atol=1e-7)
    np.testing.assert_allclose(gadv.gigpo_advantages(r2, obs2, m2, 1, episode_stats="episodes"),
                               [[0.7, 0.7]], rtol=1e-6)


def test_gigpo_equal_values_give_exactly_zero():
    # Returns that float32 cannot represent exactly, repeated over unequal lengths and in
    # shared anchors: the centred values are exactly 0, never rounding noise / eps.
    r = jnp.array([[0.1, 0.2, 0.3], [0.3, 0.3, np.nan], [0.6, np.nan, np.nan]])
    m = jnp.isfinite(r)
    obs = jnp.zeros((3, 3, 1), jnp.int32).at[0, :, 0].set(jnp.array([5, 6, 7]))
    out = gadv.gigpo_advantages(r, obs, m, 3, gamma=1.0, mode="mean_std_norm")
    # R(tau) = 0.6 each. R_t: ep 0 (0.6, 0.5, 0.3) on its own obs (singletons);
    # ep 1 (0.6, 0.3) and ep 2 (0.6) share obs 0: anchor {0.6, 0.3, 0.6}.
    ret = np.array([0.6, 0.3, 0.6])
    want = (ret - ret.mean()) / (np.std(ret, ddof=1) + 1e-6)
    np.testing.assert_allclose(out[1:, 0], [want[0], want[2]], rtol=1e-5)
    np.testing.assert_allclose(out[1, 1], want[1], rtol=1e-5)
    assert np.all(np.asarray(out)[0] == 0.0)


@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 3),
       group_size=st.integers(1, 4), t=st.integers(1, 6), o=st.integers(1, 3),
       vocab=st.integers(1, 3), gamma=st.sampled_from([1.0, 0.95, 0.5]),
       omega=st.sampled_from([1.0, 0.5, 0.0]), mode=_MODES, episode_stats=_STATS,
       penalised=st.booleans())
def test_gigpo_matches_numpy_loops(seed, num_groups, group_size, t, o, vocab, gamma, omega,
                                   mode, episode_stats, penalised):
    r, obs, m = _gigpo_batch(seed, num_groups, group_size, t, o, vocab)
    p = _penalties(seed, m) if penalised else None
    out = _gigpo(jnp.asarray(r), jnp.asarray(obs), jnp.asarray(m), group_size, gamma=gamma,
                 omega=omega, mode=mode, episode_stats=episode_stats,
                 penalties=None if p is None else jnp.asarray(p))
    ref = _gigpo_numpy(r, obs, m, group_size, gamma, omega, mode, episode_stats, p=p)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert np.all(np.asarray(out)[~m] == 0)   # masked turns (nan rewards there) are 0


@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 3),
       group_size=st.integers(1, 4), t=st.integers(1, 6), mode=_MODES,
       episode_stats=_STATS, fill=st.sampled_from([np.nan, np.inf, 1e30]))
def test_gigpo_padding_changes_nothing(seed, num_groups, group_size, t, mode, episode_stats,
                                       fill):
    """Whatever sits in the turns that did not happen (rewards nan / inf / huge, any
    observation) the advantages are those of zeros there."""
    r, obs, m = _gigpo_batch(seed, num_groups, group_size, t, 2, 2)
    rng = np.random.default_rng(seed + 1)
    other_obs = np.where(m[..., None], obs, rng.integers(0, 2, size=obs.shape)).astype(np.int32)
    kw = dict(group_size=group_size, mode=mode, episode_stats=episode_stats)
    dirty = _gigpo(jnp.asarray(np.where(m, r, fill).astype(np.float32)),
                   jnp.asarray(other_obs), jnp.asarray(m), **kw)
    clean = _gigpo(jnp.asarray(np.where(m, r, 0.0).astype(np.float32)), jnp.asarray(obs),
                   jnp.asarray(m), **kw)
    assert np.all(np.isfinite(np.asarray(dirty)))
    np.testing.assert_array_equal(np.asarray(dirty), np.asarray(clean))


@given(seed=st.integers(0, 2**31 - 1), group_size=st.integers(2, 4), t=st.integers(1, 5),
       mode=_MODES)
def test_gigpo_anchor_groups_by_equality_only(seed, group_size, t, mode):
    """Relabelling tokens changes nothing; changing one token of a shared observation
    splits it off: that turn gets A^E only, the rest of the group loses its return."""
    r, _, m = _gigpo_batch(seed, 2, group_size, t, 2, 1)
    r = np.nan_to_num(r, nan=0.5)
    m[:, 0] = True                                  # every episode has turn 0
    obs = np.zeros(r.shape + (2,), np.int32)        # one observation shared by every turn
    fn = lambda o, **kw: np.asarray(_gigpo(  # noqa: E731
        jnp.asarray(r), jnp.asarray(o), jnp.asarray(m), group_size, mode=mode, **kw))
    base = fn(obs)
    np.testing.assert_allclose(fn(obs + 7), base, rtol=1e-6, atol=1e-6)
    split = obs.copy()
    split[0, 0, 1] = 5                              # one token of episode 0's turn 0
    out, episode = fn(split), fn(split, omega=0.0)
    assert out[0, 0] == pytest.approx(episode[0, 0], abs=1e-6)
    rest = m.copy()
    rest[0, 0] = False
    rest[group_size:] = False                       # the first group, without (0, 0)
    ret = _returns_numpy(r, m, 0.95)
    mean = ret[rest].mean()
    f = (np.std(ret[rest], ddof=1) + 1e-6 if mode == "mean_std_norm" and rest.sum() > 1
         else 1.0)
    np.testing.assert_allclose(out[rest], episode[rest] + (ret[rest] - mean) / f,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[group_size:], base[group_size:])  # other group untouched


@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 3),
       group_size=st.integers(1, 4), t=st.integers(1, 6), vocab=st.integers(1, 3),
       mode=_MODES, episode_stats=_STATS)
def test_gigpo_step_advantages_sum_to_zero_per_anchor_group(seed, num_groups, group_size, t,
                                                            vocab, mode, episode_stats):
    """A^S (= A - A at omega 0) sums to 0 over every anchor group of two or more turns
    (mean_std_norm divides a group by one constant); singletons get exactly 0."""
    r, obs, m = _gigpo_batch(seed, num_groups, group_size, t, 2, vocab)
    args = (jnp.asarray(r), jnp.asarray(obs), jnp.asarray(m), group_size)
    kw = dict(mode=mode, episode_stats=episode_stats)
    a_s = np.asarray(_gigpo(*args, **kw)) - np.asarray(_gigpo(*args, omega=0.0, **kw))
    for members in _anchor_groups(obs, m, group_size).values():
        values = np.array([a_s[i, k] for i, k in members])
        if len(members) == 1:
            assert values[0] == 0.0
        else:
            assert abs(values.sum()) < 1e-5 * (1.0 + np.abs(values).sum())


@given(seed=st.integers(0, 2**31 - 1), group_size=st.integers(2, 4), t=st.integers(1, 6),
       omega=st.sampled_from([1.0, 0.5]), mode=_MODES)
def test_gigpo_per_episode_stats_are_grpo(seed, group_size, t, omega, mode):
    """With every episode at least one turn long: episode_stats="episodes" makes A^E
    GRPO's advantage (ddof 1, + eps); with all anchors singletons, or omega = 0, A is A^E."""
    r, obs, m = _gigpo_batch(seed, 2, group_size, t, 2, 3, min_len=1)
    b = r.shape[0]
    rj, mj = jnp.where(jnp.asarray(m), jnp.asarray(r), 0.0), jnp.asarray(m)
    grpo = gadv.grpo_advantages(adv.episode_returns(rj, mj), group_size,
                                normalise_std=mode == "mean_std_norm")
    expected = np.asarray(grpo)[:, None] * m
    unique = jnp.arange(b * t * 2, dtype=jnp.int32).reshape(b, t, 2)  # every anchor a singleton
    kw = dict(mode=mode, episode_stats="episodes")
    np.testing.assert_allclose(_gigpo(jnp.asarray(r), unique, mj, group_size, omega=omega,
                                      **kw), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_gigpo(jnp.asarray(r), jnp.asarray(obs), mj, group_size,
                                      omega=0.0, **kw), expected, rtol=1e-5, atol=1e-5)


def test_gigpo_checks_its_arguments():
    from asct_jax.infra.checks import ConfigError
    r, obs, m = map(jnp.asarray, _gigpo_batch(0, 2, 2, 3, 2, 2))
    with pytest.raises(ConfigError, match=r"^mode: 'std' is not allowed; "
                                          r"allowed: mean_norm, mean_std_norm$"):
        gadv.gigpo_advantages(r, obs, m, 2, mode="std")
    with pytest.raises(ConfigError, match=r"^episode_stats: 'trajectories' is not allowed"):
        gadv.gigpo_advantages(r, obs, m, 2, episode_stats="trajectories")
    with pytest.raises(ConfigError, match=r"^eps: "):
        gadv.gigpo_advantages(r, obs, m, 2, eps=0.0)
    with pytest.raises(ValueError, match="multiple of group_size"):
        gadv.gigpo_advantages(r, obs, m, 3)
    with pytest.raises(AssertionError):
        gadv.gigpo_advantages(r, obs.astype(jnp.float32), m, 2)
    with pytest.raises(AssertionError):
        gadv.gigpo_advantages(r, obs[:, :2], m, 2)
    np.testing.assert_allclose(_gigpo(r, obs, m, group_size=2, gamma=0.9, omega=0.5),
                               gadv.gigpo_advantages(r, obs, m, 2, gamma=0.9, omega=0.5),
                               rtol=1e-6, atol=1e-6)


# ---------------------------------------- GRPO over step samples, the invalid-action penalty
_grpo_steps = jax.jit(gadv.grpo_step_advantages,
                      static_argnames=("group_size", "stats", "normalise_std"))


def test_grpo_step_samples_weigh_episodes_by_their_turns():
    # G = 2, T = 3: ep 0 one turn, r = 2; ep 1 three turns, r = 0, 1, 0 (nan padding).
    r = jnp.array([[2., np.nan, np.nan], [0., 1., 0.]])
    m = jnp.array([[1, 0, 0], [1, 1, 1]], bool)
    # R(tau) = 2, 1. Step samples (2, 1, 1, 1): mean 5/4, centred 3/4 | -1/4 (x3),
    #   sample std sqrt((9/16 + 3/16) / 3) = 1/2  ->  3/2 | -1/2 on each of ep 1's turns.
    # Episode samples (2, 1): mean 3/2, centred +-1/2, sample std 1/sqrt2 -> +-1/sqrt2.
    steps = gadv.grpo_step_advantages(r, m, 2, eps=1e-12)
    np.testing.assert_allclose(steps, [[1.5, 0, 0], [-0.5, -0.5, -0.5]], rtol=1e-6)
    episodes = gadv.grpo_step_advantages(r, m, 2, stats="episodes", eps=1e-12)
    h = 1 / np.sqrt(2)
    np.testing.assert_allclose(episodes, [[h, 0, 0], [-h, -h, -h]], rtol=1e-6)
    # Dr. GRPO (no std): the centred values.
    np.testing.assert_allclose(gadv.grpo_step_advantages(r, m, 2, normalise_std=False),
                               [[0.75, 0, 0], [-0.25, -0.25, -0.25]], rtol=1e-6)
    # The per-episode statistics are the earlier per-episode GRPO on every turn.
    g = adv.episode_returns(jnp.where(m, r, 0.0), m)
    np.testing.assert_allclose(episodes, gadv.grpo_advantages(g, 2, eps=1e-12)[:, None] * m,
                               rtol=1e-6)


def test_grpo_penalty_is_taken_off_the_invalid_steps_own_score():
    # G = 2, T = 3. ep 0: env rewards 0, 0, 1 and an invalid middle step (p = 0.1);
    # ep 1: rewards 0, 0, 0. Scores s = R(tau) - p: ep 0 (1, 0.9, 1), ep 1 (0, 0, 0).
    r = jnp.array([[0., 0., 1.], [0., 0., 0.]])
    p = jnp.array([[0., 0.1, 0.], [0., 0., 0.]])
    m = jnp.ones((2, 3), bool)
    # Step samples: mean 2.9 / 6 = 29/60; centred 31/60, 25/60, 31/60 | -29/60 (x3);
    #   sample variance (961 + 625 + 961 + 3 * 841) / 3600 / 5 = 5070 / 18000.
    c = np.array([[31, 25, 31], [-29, -29, -29]]) / 60
    np.testing.assert_allclose(gadv.grpo_step_advantages(r, m, 2, penalties=p,
                                                         normalise_std=False), c, rtol=1e-5)
    np.testing.assert_allclose(gadv.grpo_step_advantages(r, m, 2, penalties=p, eps=1e-12),
                               c / np.sqrt(5070 / 18000), rtol=1e-5)
    # Per-episode statistics over R(tau) = (1, 0): mean 1/2, std 1/sqrt2; only the
    # invalid step's own score moves, by -0.1.
    e = np.array([[0.5, 0.4, 0.5], [-0.5, -0.5, -0.5]])
    np.testing.assert_allclose(gadv.grpo_step_advantages(r, m, 2, penalties=p,
                                                         stats="episodes", eps=1e-12),
                               e * np.sqrt(2), rtol=1e-5)
    # The earlier placement (p in r_t: every step carries G = 0.9) is what rewards - p gives.
    np.testing.assert_allclose(gadv.grpo_step_advantages(r - p, m, 2, normalise_std=False),
                               [[0.45] * 3, [-0.45] * 3], rtol=1e-5)


def test_gigpo_penalty_is_taken_off_the_invalid_steps_own_returns():
    # G = 2, T = 3, gamma = 0.5, mean_norm. Both episodes see observations 1, 2, 3 at turns
    # 0, 1, 2 (anchor pairs {(0, t), (1, t)}). ep 0: env rewards 0, 0, 1, invalid middle
    # step (p = 0.1); ep 1: rewards 0, 0, 0.
    r = jnp.array([[0., 0., 1.], [0., 0., 0.]])
    p = jnp.array([[0., 0.1, 0.], [0., 0., 0.]])
    m = jnp.ones((2, 3), bool)
    obs = jnp.tile(jnp.arange(1, 4, dtype=jnp.int32)[None, :, None], (2, 1, 1))
    # R_t of ep 0 without the penalty: (0 + .5 * .5, 0 + .5 * 1, 1) = (0.25, 0.5, 1);
    # less its own p after discounting: (0.25, 0.4, 1) (p in r_t would give R_0 = 0.2).
    # ep 1: R_t = 0. Anchor pair means: (0.125, 0.2, 0.5) -> A^S = +-(0.125, 0.2, 0.5).
    # A^E: the GRPO scores above, centred: (31, 25, 31) / 60 | -29 / 60.
    a_s = np.array([[0.125, 0.2, 0.5], [-0.125, -0.2, -0.5]])
    a_e = np.array([[31, 25, 31], [-29, -29, -29]]) / 60
    out = gadv.gigpo_advantages(r, obs, m, 2, gamma=0.5, penalties=p)
    np.testing.assert_allclose(out, a_e + a_s, rtol=1e-5)
    # The earlier placement (p in r_t): R_0 of ep 0 falls to 0.2 and every A^E is the
    # episode's: R(tau) = 0.9, 0 -> +-0.45.
    old = gadv.gigpo_advantages(r - p, obs, m, 2, gamma=0.5)
    np.testing.assert_allclose(old, [[0.45 + 0.1, 0.45 + 0.2, 0.45 + 0.5],
                                     [-0.45 - 0.1, -0.45 - 0.2, -0.45 - 0.5]], rtol=1e-5)


@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 3),
       group_size=st.integers(2, 4), t=st.integers(1, 6), normalise_std=st.booleans())
@settings(deadline=None)
def test_grpo_step_and_episode_statistics_agree_on_equal_lengths(seed, num_groups,
                                                                 group_size, t,
                                                                 normalise_std):
    """No penalty and every episode L turns long: L copies of each return have the
    episodes' mean, so the centred values agree (and "episodes" is the earlier per-episode
    GRPO); the sample std of the L G copies is sqrt(L (G - 1) / (L G - 1)) times the
    episodes' (ddof 1 on both), so mean_std advantages differ by that factor."""
    rng = np.random.default_rng(seed)
    b = num_groups * group_size
    length = int(rng.integers(1, t + 1))
    m = np.broadcast_to(np.arange(t)[None] < length, (b, t))
    r = np.where(m, rng.normal(size=(b, t)), np.nan).astype(np.float32)
    kw = dict(group_size=group_size, normalise_std=normalise_std)
    steps = np.asarray(_grpo_steps(jnp.asarray(r), jnp.asarray(m), stats="steps", **kw))
    episodes = np.asarray(_grpo_steps(jnp.asarray(r), jnp.asarray(m), stats="episodes", **kw))
    g = adv.episode_returns(jnp.asarray(np.where(m, r, 0.0)), jnp.asarray(m))
    grpo = np.asarray(gadv.grpo_advantages(g, group_size, normalise_std=normalise_std))
    np.testing.assert_allclose(episodes, grpo[:, None] * m, rtol=1e-4, atol=1e-4)
    if not normalise_std or length == 1:
        np.testing.assert_allclose(steps, episodes, rtol=1e-4, atol=1e-4)
    else:   # the same centred values over a smaller std: steps = episodes * sd_e / sd_s
        scale = np.sqrt(length * (group_size - 1) / (length * group_size - 1))
        np.testing.assert_allclose(steps * scale, episodes, rtol=1e-3, atol=1e-3)


@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 3),
       group_size=st.integers(1, 4), t=st.integers(1, 6), mode=_MODES,
       stats=_STATS, penalised=st.booleans())
@settings(deadline=None)
def test_grpo_steps_is_gigpo_episode_term(seed, num_groups, group_size, t, mode, stats,
                                          penalised):
    """GRPO over step samples is GiGPO's A^E (omega = 0), penalties included."""
    r, obs, m = _gigpo_batch(seed, num_groups, group_size, t, 2, 2)
    p = jnp.asarray(_penalties(seed, m)) if penalised else None
    r, obs, m = map(jnp.asarray, (r, obs, m))
    np.testing.assert_allclose(
        _grpo_steps(r, m, group_size, penalties=p, stats=stats,
                    normalise_std=mode == "mean_std_norm"),
        _gigpo(r, obs, m, group_size, omega=0.0, mode=mode, episode_stats=stats,
               penalties=p), rtol=1e-6, atol=1e-6)


@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 3),
       group_size=st.integers(2, 4), t=st.integers(1, 6), gamma=st.sampled_from([1.0, 0.5]))
@pytest.mark.slow
@settings(deadline=None)
def test_penalty_moves_only_the_invalid_steps_own_inputs(seed, num_groups, group_size, t,
                                                         gamma):
    """With per-episode statistics (a set without penalties), mean_norm and every anchor a
    singleton, A(p) - A(0) = -p on the invalid turns and 0 elsewhere, in GRPO and GiGPO;
    GiGPO's anchor term sees p only through R_t - p of the invalid turn itself."""
    r, obs, m = _gigpo_batch(seed, num_groups, group_size, t, 2, 2)
    p = _penalties(seed, m)
    b = r.shape[0]
    rj, mj, pj = jnp.asarray(r), jnp.asarray(m), jnp.asarray(p)
    want = -np.where(m, p, 0.0)
    kw = dict(stats="episodes", normalise_std=False)
    np.testing.assert_allclose(_grpo_steps(rj, mj, group_size, penalties=pj, **kw)
                               - _grpo_steps(rj, mj, group_size, **kw), want, atol=1e-6)
    unique = jnp.arange(b * t * 2, dtype=jnp.int32).reshape(b, t, 2)
    gkw = dict(gamma=gamma, episode_stats="episodes")
    np.testing.assert_allclose(_gigpo(rj, unique, mj, group_size, penalties=pj, **gkw)
                               - _gigpo(rj, unique, mj, group_size, **gkw), want, atol=1e-6)
    # Shared anchors: A^S is the anchor group's centred R_t - p (numpy reference).
    out = _gigpo(rj, jnp.asarray(obs), mj, group_size, penalties=pj, **gkw)
    ref = _gigpo_numpy(r, obs, m, group_size, gamma, 1.0, "mean_norm", "episodes", p=p)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_grpo_step_advantages_checks_its_arguments():
    from asct_jax.infra.checks import ConfigError
    r, m = jnp.zeros((4, 3)), jnp.ones((4, 3), bool)
    with pytest.raises(ConfigError, match=r"^stats: 'turns' is not allowed"):
        gadv.grpo_step_advantages(r, m, 2, stats="turns")
    with pytest.raises(ValueError, match="multiple of group_size"):
        gadv.grpo_step_advantages(r, m, 3)
    with pytest.raises(AssertionError):
        gadv.grpo_step_advantages(r, m, 2, penalties=jnp.zeros((4, 2)))
