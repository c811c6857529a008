"""asct_jax.envs.toy_tree: the complete K-ary tree numbered in level order (child k of n
is n K + k + 1); the constructor's and `from_size`'s one-line refusals; `make_params`'
tables (seeded; >= 1 legal action per inner node, none at the leaves, every edge of the
last level terminal, terminal rewards in [0, 1), the other edges' penalty proportional to
their cost); `parse_action` and `step` against a plain-Python model of the rules (legal
moves, illegal and garbage actions that do nothing, the turn limit, absorbing done, the
observation and feedback tokens, success and score); zero-mean terminal reward noise;
the table policy; and `exact_q` against a brute-force enumeration of the paths and the
Monte-Carlo mean of the environment's own returns."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from asct_jax.envs.base import BOS_ID, EOS_ID, PAD_ID
from asct_jax.envs.toy_tree import PRESETS, ToyTree

ENV = ToyTree(num_actions=3, depth=2, action_len=4)     # 13 nodes
K, T, A = 3, 2, 4


def _levels(k, depth):
    """Level-order numbering by a breadth-first walk: [(node, level, parent)]."""
    out, frontier, nxt = [(0, 0, -1)], [0], 1
    for level in range(1, depth + 1):
        new = []
        for parent in frontier:
            for _ in range(k):
                out.append((nxt, level, parent))
                new.append(nxt)
                nxt += 1
        frontier = new
    return out


@pytest.mark.parametrize("k, depth", [(3, 2), (4, 3), (2, 5)])
def test_nodes_are_the_complete_tree_in_level_order(k, depth):
    env = ToyTree(num_actions=k, depth=depth)
    walk = _levels(k, depth)
    assert env.num_nodes == len(walk) == sum(k ** i for i in range(depth + 1))
    np.testing.assert_array_equal(env.levels, [lv for _, lv, _ in walk])
    for node, _, parent in walk[1:]:            # child (node - 1) % k of its parent
        assert node == parent * k + (node - 1) % k + 1
    assert env.max_turns == depth and (env.obs_len, env.feedback_len) == (4, 3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_actions=1), "num_actions must be >= 2, got 1"),
    (dict(depth=0), "depth must be in [1, 7], got 0"),
    (dict(depth=8), "depth must be in [1, 7], got 8"),
    (dict(action_len=1), "action_len must be >= 2, got 1")])
def test_the_constructor_refuses_bad_sizes_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as e:
        ToyTree(**kwargs)
    assert str(e.value) == message


def test_from_size_applies_the_preset_and_refuses_unknown_names():
    env = ToyTree.from_size("hard", depth=2)
    assert (env.num_actions, env.depth, env.action_len) == (4, 2, PRESETS["hard"]["action_len"])
    assert ToyTree.from_size().depth == PRESETS["small"]["depth"]
    for call, words in ((lambda: ToyTree.from_size("huge"), ("size", "huge", "small", "hard")),
                        (lambda: ToyTree.from_size(colour=1), ("'colour'", "'toy_tree'",
                                                               "allowed fields", "'depth'"))):
        with pytest.raises(ValueError) as e:
            call()
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words)


@given(seed=st.integers(0, 10_000), penalty=st.sampled_from([0.0, 0.01]))
def test_make_params_tables(seed, penalty):
    p = ENV.make_params(seed=seed, step_penalty=penalty, reward_noise=0.25)
    legal, term = np.asarray(p.legal), np.asarray(p.terminates)
    rew, lv = np.asarray(p.rewards), ENV.levels
    assert legal.shape == term.shape == rew.shape == (13, K) and rew.dtype == np.float32
    assert legal[lv < T].any(1).all() and not legal[lv == T].any()
    assert term[lv == T - 1].all()
    assert ((rew[term] >= 0) & (rew[term] < 1)).all()
    costs = 3.0 ** np.arange(K)
    np.testing.assert_array_equal(p.costs, costs)
    np.testing.assert_allclose(rew[~term], (-penalty * np.broadcast_to(costs, (13, K)))[~term])
    assert float(p.reward_noise) == 0.25 and float(p.success_threshold) == 0.5
    assert np.asarray(p.restorable).all()
    again, other = ENV.make_params(seed=seed, step_penalty=penalty), ENV.make_params(seed=seed + 1)
    np.testing.assert_array_equal(again.rewards, p.rewards)
    assert not np.array_equal(other.rewards, p.rewards)
    np.testing.assert_array_equal(ENV.make_params(costs=[2, 5, 7]).costs, [2, 5, 7])


# -- the rules ------------------------------------------------------------------------------

def _parse(tokens):
    k = int(tokens[0]) - 5
    ok = 0 <= k < K and tokens[1] == EOS_ID and all(t == PAD_ID for t in tokens[2:])
    return min(max(k, 0), K - 1), ok


_parse_jit = jax.jit(ENV.parse_action)


@given(first=st.integers(2, 5 + K), second=st.sampled_from([EOS_ID, PAD_ID, 7]),
       tail=st.lists(st.sampled_from([PAD_ID, PAD_ID, EOS_ID, 6]), min_size=A - 2,
                     max_size=A - 2))
@example(first=6, second=EOS_ID, tail=[PAD_ID, 6])           # a token after EOS
@example(first=6, second=EOS_ID, tail=[EOS_ID, PAD_ID])
def test_parse_action_accepts_exactly_candidate_eos_pad(first, second, tail):
    tokens = [first, second] + tail
    k, ok = _parse_jit(jnp.asarray(tokens, jnp.int32))
    assert (int(k), bool(ok)) == _parse(tokens)


def test_legal_actions_costs_and_success():
    params = ENV.make_params(seed=4)
    s, _ = ENV.reset(jax.random.PRNGKey(0), params)
    s = s.replace(node=jnp.int32(2))
    cands, legal = ENV.legal_actions(s, params)
    np.testing.assert_array_equal(cands, [[5 + k, EOS_ID, PAD_ID, PAD_ID] for k in range(K)])
    np.testing.assert_array_equal(legal, np.asarray(params.legal)[2])
    assert not ENV.legal_actions(s.replace(done=jnp.array(True)), params)[1].any()
    np.testing.assert_array_equal(ENV.action_costs(s, params), params.costs)
    assert [int(ENV.parse_action(c)[0]) for c in cands] == list(range(K))
    info = lambda **kw: {k: float(v) for k, v in ENV.info(s.replace(**kw), params).items()}  # noqa
    assert info(ret=jnp.float32(0.9), done=jnp.array(False)) == pytest.approx(
        {"success": 0.0, "score": 0.9})
    assert info(ret=jnp.float32(0.5), done=jnp.array(True))["success"] == 1.0   # >= threshold
    assert info(ret=jnp.float32(0.4), done=jnp.array(True))["success"] == 0.0


@jax.jit
def _step(state, action, params):
    return ENV.step(state, action, params)


@given(seed=st.integers(0, 10_000),
       kinds=st.lists(st.sampled_from(["legal", "illegal", "garbage"]), min_size=4, max_size=4))
def test_step_follows_the_rules(seed, kinds):
    """Four turns of legal / illegal / garbage actions (past the turn limit) against a
    Python model: reward, node, turn, done, return, feedback, observation, success."""
    params = ENV.make_params(seed=seed, success_threshold=0.3)
    legal, term, rew = (np.asarray(x) for x in (params.legal, params.terminates, params.rewards))
    rng = np.random.default_rng(seed)
    s, ts = ENV.reset(jax.random.PRNGKey(seed), params)
    node = turn = 0
    done, ret = False, 0.0
    np.testing.assert_array_equal(ts.observation, [BOS_ID, 16, 8, EOS_ID])
    for kind in kinds:
        ks = np.flatnonzero(legal[node] if kind == "legal" else ~legal[node])
        if kind == "garbage" or len(ks) == 0:
            action = [5 + int(rng.integers(K)), 7, PAD_ID, PAD_ID]     # no EOS
        else:
            action = [5 + int(rng.choice(ks)), EOS_ID, PAD_ID, PAD_ID]
        k, ok = _parse(action)
        s, ts = _step(s, jnp.asarray(action, jnp.int32), params)
        if done:                                   # absorbing
            want_r, fb = 0.0, 14
        else:
            moved = ok and legal[node, k]
            want_r = float(rew[node, k]) if moved else 0.0
            if moved:
                done, node = bool(term[node, k]), node * K + k + 1
            turn += 1
            done = done or turn >= T
            fb = 14 if done else 13 if moved else 12
        ret += want_r
        assert float(ts.reward) == pytest.approx(want_r, abs=1e-7)
        assert (int(s.node), int(s.turn), bool(s.done), bool(ts.done)) == (node, turn, done, done)
        assert float(s.ret) == pytest.approx(ret, abs=1e-6)
        np.testing.assert_array_equal(ts.feedback, [fb, EOS_ID, PAD_ID])
        np.testing.assert_array_equal(ts.observation, [BOS_ID, 16 + node, 8 + turn, EOS_ID])
        assert float(ts.info["score"]) == pytest.approx(ret, abs=1e-6)
        assert float(ts.info["success"]) == float(done and ret >= 0.3)


def test_terminal_reward_noise_is_zero_mean_with_the_given_std():
    params = ENV.make_params(seed=5, reward_noise=0.5)
    legal, term, rew = (np.asarray(x) for x in (params.legal, params.terminates, params.rewards))
    edges = [(n, k) for n in range(4) for k in range(K) if legal[n, k]]
    n_term, k_term = next(e for e in edges if term[e])
    state = ENV.reset(jax.random.PRNGKey(0), params)[0]
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)

    @jax.jit
    def rewards(node, k):
        action = jnp.array([5, EOS_ID, PAD_ID, PAD_ID]).at[0].add(k)
        return jax.vmap(lambda key: ENV.step(state.replace(node=node, key=key), action,
                                             params)[1].reward)(keys)
    r = np.asarray(rewards(n_term, k_term), np.float64)
    assert abs(r.mean() - rew[n_term, k_term]) < 4 * 0.5 / np.sqrt(len(r))
    assert r.std() == pytest.approx(0.5, rel=0.06)
    inner = [e for e in edges if not term[e]]
    if inner:                                      # a non-terminal edge: no noise
        np.testing.assert_array_equal(rewards(*inner[0]), rew[inner[0]])


# -- the table policy and the exact values --------------------------------------------------

def test_policy_fn_is_the_legal_softmax_of_policy_probs():
    params = ENV.make_params(seed=6)
    logits = np.random.default_rng(6).normal(size=(13, K)).astype(np.float32)
    values = np.arange(13, dtype=np.float32)
    pi = jax.jit(ENV.policy_fn(params, logits, values))
    probs = ENV.policy_probs(params, logits)
    state = ENV.reset(jax.random.PRNGKey(0), params)[0]
    for node in range(13):
        logp, v = pi(state.replace(node=jnp.int32(node)))
        np.testing.assert_allclose(np.exp(np.asarray(logp)), probs[node], atol=1e-6)
        assert float(v) == node
        assert float(pi(state.replace(node=jnp.int32(node), done=jnp.array(True)))[1]) == 0.0
    np.testing.assert_allclose(probs[ENV.levels < T].sum(1), 1.0)
    assert not probs[ENV.levels == T].any()


def _paths(params, node, a):
    """[(probability, deterministic return)] of every path that takes a at node, then the
    policy (probs from policy_probs), to its terminal edge."""
    probs = ENV.policy_probs(params, LOGITS)
    r = float(params.rewards[node, a])
    if bool(params.terminates[node, a]):
        return [(1.0, r)]
    child, out = node * K + a + 1, []
    for b in np.flatnonzero(probs[child] > 0):
        out += [(probs[child, b] * q, r + g) for q, g in _paths(params, child, b)]
    return out


LOGITS = np.random.default_rng(7).normal(size=(13, K))


@given(seed=st.integers(0, 10_000), noise=st.sampled_from([0.0, 0.7]))
def test_exact_q_enumerates_the_paths(seed, noise):
    params = ENV.make_params(seed=seed, reward_noise=noise)
    out = ENV.exact_q(params, ENV.policy_probs(params, LOGITS))
    legal, sigma2 = np.asarray(params.legal), float(params.reward_noise) ** 2   # float32's 0.7
    assert np.isnan(out["q"][~legal]).all() and np.isnan(out["q2"][~legal]).all()
    for node in np.flatnonzero(ENV.levels < T):
        for a in np.flatnonzero(legal[node]):
            paths = _paths(params, node, a)
            assert sum(p for p, _ in paths) == pytest.approx(1.0)
            assert out["q"][node, a] == pytest.approx(sum(p * g for p, g in paths), abs=1e-9)
            assert out["q2"][node, a] == pytest.approx(
                sum(p * (g * g + sigma2) for p, g in paths), abs=1e-9)
    probs = ENV.policy_probs(params, LOGITS)
    np.testing.assert_allclose(out["v"], np.nansum(probs * np.nan_to_num(out["q"]), 1))
    assert not out["v"][ENV.levels == T].any()


def test_exact_q_is_the_mean_return_of_the_environment():
    """4000 episodes played by env.step under the table policy (noisy rewards), the first
    action forced or not: mean returns within 4 standard errors of q[0, a] and v[0]."""
    params = ENV.make_params(seed=8, reward_noise=0.5)
    out = ENV.exact_q(params, ENV.policy_probs(params, LOGITS))
    pi = ENV.policy_fn(params, LOGITS)
    n = 4000

    @jax.jit
    def returns(first, key):
        def episode(key):
            s, _ = ENV.reset(key, params)
            g = 0.0
            for t, k in enumerate(jax.random.split(key, T)):
                a = jax.random.categorical(k, pi(s)[0])
                a = jnp.where(first >= 0, first, a) if t == 0 else a
                s, ts = ENV.step(s, ENV.legal_actions(s, params)[0][a], params)
                g = g + ts.reward
            return g
        return jax.vmap(episode)(jax.random.split(key, n))
    for first in [-1] + [int(a) for a in np.flatnonzero(np.asarray(params.legal)[0])]:
        g = np.asarray(returns(jnp.int32(first), jax.random.PRNGKey(first + 10)), np.float64)
        want, second = ((out["v"][0], out["v2"][0]) if first < 0
                        else (out["q"][0, first], out["q2"][0, first]))
        assert abs(g.mean() - want) < 4 * np.sqrt((second - want ** 2) / n), first
