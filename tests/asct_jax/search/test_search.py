"""Tests of asct_jax.search's loop (search.search, with the paper's rules passed as
callables), its config and mc_return, on ToyTree (tests/helpers/toy_search.py): the Q
table against exact values, done roots, the tree's invariants and costs per rule. The
stages one by one are in test_search_stages.py, the searches on TinyWorkflow in
test_search_tiny_workflow.py.

ToyTree's values are enumerable exactly (ToyTree.exact_q), so the search's Q table is
compared with exact values at a tolerance set by the number of visits: 4 standard errors
of the pooled mean, the per-sample std from the exact second moment.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax import search as S
from asct_jax.envs.base import EOS_ID, PAD_ID, Environment
from tests.helpers import tiny_workflow as tw
from tests.helpers.toy_search import (  # noqa: F401 (rule_runs: a module-scoped fixture)
    DEPTH2_UNIFORM, ENV, K, RULE_CFGS, UNIFORM_ACTOR, jit_search as _jit_search,
    make_rules as _rules, random_logits as _logits, roots as _roots, rule_runs,
    run_search as _run)


# --------------------------------------------------------------------------- ToyTree
def test_toy_tree_protocol():
    params = ENV.make_params(seed=3)
    assert isinstance(ENV, Environment)
    state, ts = ENV.reset(jax.random.PRNGKey(0), params)
    assert ts.observation.shape == (ENV.obs_len,) and ts.feedback.shape == (ENV.feedback_len,)
    assert set(ts.info) >= {"success", "score"}
    cands, legal = ENV.legal_actions(state, params)
    assert cands.shape == (K, ENV.action_len) and legal.shape == (K,)
    assert np.all(np.asarray(cands[:, 1]) == EOS_ID) and np.all(np.asarray(cands[:, 2:]) == PAD_ID)
    k_legal = int(np.argmax(np.asarray(legal)))
    # An unparseable action: nothing happens but the turn advances.
    s2, ts2 = ENV.step(state, jnp.array([99, EOS_ID, PAD_ID], jnp.int32), params)
    assert int(s2.node) == 0 and int(s2.turn) == 1 and float(ts2.reward) == 0.0
    s3, ts3 = ENV.step(state, cands[k_legal], params)
    assert int(s3.node) == k_legal + 1
    assert float(ts3.reward) == pytest.approx(float(params.rewards[0, k_legal]))
    # Absorbing after done.
    s = state
    for _ in range(ENV.max_turns):
        c, lg = ENV.legal_actions(s, params)
        s, ts = ENV.step(s, c[int(np.argmax(np.asarray(lg)))], params)
    assert bool(ts.done)
    s_after, ts_after = ENV.step(s, cands[0], params)
    assert float(ts_after.reward) == 0.0 and bool(ts_after.done)
    assert not np.any(np.asarray(ENV.legal_actions(s, params)[1]))
    assert int(s_after.node) == int(s.node) and float(s_after.ret) == float(s.ret)


def test_mc_return_matches_exact_value_stochastic():
    params = ENV.make_params(seed=2, reward_noise=0.3)
    logits = _logits(1)
    pi = ENV.policy_fn(params, logits)
    m = 4000
    state, _ = ENV.reset(jax.random.PRNGKey(0), params)
    fn = jax.jit(lambda s, k, r: jax.lax.cond(
        r, lambda: S.mc_return(ENV, params, s, pi, k, m, rekey=True),
        lambda: S.mc_return(ENV, params, s, pi, k, m, rekey=False)))
    mean, rets, tok, calls = fn(state, jax.random.PRNGKey(5), True)
    ex = ENV.exact_q(params, ENV.policy_probs(params, logits))
    std = np.sqrt(ex["v2"][0] - ex["v"][0] ** 2)
    assert rets.shape == (m,)
    assert abs(float(mean) - ex["v"][0]) < 4 * std / np.sqrt(m)
    assert 1 <= int(calls) / m <= ENV.max_turns and float(tok) > 0
    # Without rekey the rollouts share the state's environment randomness: a rollout's
    # return is a function of its action path alone.
    _, rets2, _, _ = fn(state, jax.random.PRNGKey(6), False)
    assert len(np.unique(np.round(np.asarray(rets2), 5))) <= int((np.asarray(params.legal).sum()))


# ---------------------------------------------------------------------- convergence
def _pooled(out, a):
    n = out.visits[:, a].astype(np.float64)
    return float(np.sum(out.q[:, a] * n) / np.sum(n)), float(np.sum(n)), int(np.sum(n > 0))


def test_q_converges_depth1_rollout():
    """max_depth=1: every simulation through a is r(a) + one pi_old rollout, an
    unbiased sample of Q^pi(root, a). (Uniform selection: an adaptive rule such as UCT
    samples an action more when its running mean is high, which biases sample means
    slightly downward.)"""
    params = ENV.make_params(seed=4)
    logits = _logits(2)
    cfg = S.SearchConfig(num_simulations=48, max_depth=1, node_policy=True)
    out = _run(UNIFORM_ACTOR, cfg, params, b=128, logits=logits)
    ex = ENV.exact_q(params, ENV.policy_probs(params, logits))
    legal = np.asarray(params.legal[0])
    assert np.all(out.q_mask[:, ~legal] == 0) and np.all(out.q_mask[:, legal])
    for a in np.flatnonzero(legal):
        est, n, _ = _pooled(out, a)
        std = np.sqrt(max(ex["q2"][0, a] - ex["q"][0, a] ** 2, 0.0))
        assert abs(est - ex["q"][0, a]) <= 4 * std / np.sqrt(n) + 1e-5, (a, est, ex["q"][0, a], n)


def test_q_converges_depth2_uniform_mixture():
    """max_depth=2, Uniform rule, pi_old suffixes: the first simulation through a ends at
    the new child (r(a) + rollout of pi_old: Q^pi), every later one takes the least-visited
    b at the child (ties at random: each b equally often in expectation) then a rollout
    (Q^mix, mix = uniform at depth 1, pi_old elsewhere). Exact expectation of the pooled
    estimate: (B_a Q^pi + (N_a - B_a) Q^mix) / N_a."""
    params = ENV.make_params(seed=5)
    logits = _logits(3)
    out = _run(UNIFORM_ACTOR, DEPTH2_UNIFORM, params, b=128, logits=logits)
    probs = ENV.policy_probs(params, logits)
    mix = probs.copy()
    lv1 = ENV.levels == 1
    legal = np.asarray(params.legal)
    mix[lv1] = legal[lv1] / np.maximum(legal[lv1].sum(1, keepdims=True), 1)
    ex_pi, ex_mix = ENV.exact_q(params, probs), ENV.exact_q(params, mix)
    for a in np.flatnonzero(legal[0]):
        est, n, trees = _pooled(out, a)
        expect = (trees * ex_pi["q"][0, a] + (n - trees) * ex_mix["q"][0, a]) / n
        var = max(ex_pi["q2"][0, a] - ex_pi["q"][0, a] ** 2, ex_mix["q2"][0, a] - ex_mix["q"][0, a] ** 2, 0)
        assert abs(est - expect) <= 4 * np.sqrt(var / n) + 1e-5, (a, est, expect, n)


def test_done_roots_are_not_searched_and_compile_once():
    """A done root gets no trial and no cost; new params, roots and keys are inputs (one
    compilation)."""
    params = ENV.make_params(seed=6)
    cfg = S.SearchConfig(num_simulations=8, max_depth=1)
    rules = _rules(S.uct)
    fn = _jit_search(rules, cfg)
    roots = _roots(params, 4)
    done = roots.replace(done=jnp.array([False, True, False, True]))
    logits, values = _logits(4), np.zeros(ENV.num_nodes, np.float32)
    out = jax.device_get(fn(params, logits, values, done, jax.random.PRNGKey(1)))
    before = fn._cache_size()
    fn(ENV.make_params(seed=7), logits, values, roots, jax.random.PRNGKey(2))
    assert fn._cache_size() == before
    assert np.all(out.visits[[1, 3]] == 0) and np.all(out.env_calls[[1, 3]] == 0)
    assert np.all(out.aux_tokens[[1, 3]] == 0) and np.all(out.visits[[0, 2]].sum(1) == 8)
    np.testing.assert_array_equal(out.aux_tokens, out.env_tokens + out.actor_tokens)


# ------------------------------------------------------------- tree invariants, costs
@pytest.mark.parametrize("rule", list(RULE_CFGS))
def test_visit_counts_add_up(rule_runs, rule):
    params, runs = rule_runs
    out, t = runs[rule], runs[rule].tree
    cfg = RULE_CFGS[rule][1]
    assert np.all(out.visits.sum(1) == cfg.num_simulations)
    assert np.all(t.node_visits[:, 0] == cfg.num_simulations)
    used = t.node_visits > 0
    used[:, 0] = False
    child_sum = t.children_visits.sum(-1)
    stop = t.terminal | ~t.searchable.any(-1)
    inner = used & (t.depth < cfg.max_depth) & ~stop
    assert np.all(t.node_visits[inner] == 1 + child_sum[inner])
    assert np.all(t.node_visits[used] >= 1 + child_sum[used])
    assert np.all(child_sum[stop] == 0) and np.all(t.depth <= cfg.max_depth)
    # Edge visits equal the child's node visits; the parent / child links agree.
    b, n, a = np.nonzero(t.children_index >= 0)
    c = t.children_index[b, n, a]
    assert np.all(t.children_visits[b, n, a] == t.node_visits[b, c])
    assert np.all(t.parents[b, c] == n) and np.all(t.action_from_parent[b, c] == a)
    assert np.all(t.depth[b, c] == t.depth[b, n] + 1)
    assert np.all(t.searchable[b, n, a])  # only legal, restorable edges were taken
    # Root Q is the visit-weighted mean of edge values.
    np.testing.assert_allclose(out.search_value, (out.q * out.visits).sum(1) / cfg.num_simulations, atol=1e-5)


def test_agentuct_spends_fewer_tokens_than_uct(rule_runs):
    params, runs = rule_runs
    uct_tok, agent_tok = runs["uct"].aux_tokens.mean(), runs["agentuct"].aux_tokens.mean()
    assert agent_tok < 0.7 * uct_tok, (agent_tok, uct_tok)
    # Root visits lean to cheaper actions: a lower visit-weighted mean root-action cost.
    costs = np.asarray(params.costs)
    mean_cost = {r: (runs[r].visits * costs).sum(1).mean() / RULE_CFGS[r][1].num_simulations for r in ("uct", "agentuct")}
    assert mean_cost["agentuct"] < mean_cost["uct"], mean_cost


UCT = _rules(S.uct)


@given(seed=st.integers(0, 10_000), p=st.floats(0.2, 0.9))
def test_illegal_and_unrestorable_never_searched(seed, p):
    env_params = ENV.make_params(seed=seed, legal_prob=p)
    rng = np.random.default_rng(seed)
    restorable = rng.random(K) < 0.7
    restorable[rng.integers(K)] = True
    env_params = env_params.replace(restorable=jnp.asarray(restorable))
    cfg = S.SearchConfig(num_simulations=16, max_depth=3)
    out = _run(UCT, cfg, env_params, b=2)
    t = out.tree
    ok = np.asarray(env_params.legal[0]) & restorable
    assert np.all(out.visits[:, ~ok] == 0) and np.all(~out.q_mask[:, ~ok])
    b, n, a = np.nonzero(t.children_index >= 0)
    assert np.all(t.legal[b, n, a]) and np.all(restorable[a])
    if ok.any():
        assert np.all(out.visits.sum(1) == 16)
    # Traversal charging: every simulation pays every edge of its path, plus its
    # continuation's steps; rule continuations score nothing.
    path_tokens = (t.children_visits * t.costs).sum((1, 2))
    assert np.all(out.env_tokens >= path_tokens - 1e-3) and np.all(out.actor_tokens == 0)
    assert np.all(out.env_calls >= t.children_visits.sum((1, 2)))


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("field,value", [
    ("num_simulations", 0), ("max_depth", 0), ("num_leaf_rollouts", 0),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        S.SearchConfig(**{field: value})
    with pytest.raises(ValueError, match="SearchConfig"):
        S.search(ENV, None, _roots(ENV.make_params(seed=0), 1), None, None, UCT, {"max_depth": 1})
    with pytest.raises(ValueError, match="SearchRules"):
        S.search(ENV, None, _roots(ENV.make_params(seed=0), 1), None, None, S.uct,
                 S.SearchConfig())
    with pytest.raises(ValueError, match="staged workflow"):
        params = ENV.make_params(seed=0)
        S.search(ENV, params, _roots(params, 1), ENV.policy_fn(params, _logits()),
                 jax.random.PRNGKey(0), UCT, S.SearchConfig(),
                 cache=S.init_cache(tw.WF, tw.make_params()))
