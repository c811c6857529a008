"""Tests of asct_jax.search's loop (search.search: simulate, expand, backward, search, with
the paper's rules passed as callables), its config and mc_return, on ToyTree and on
TinyWorkflow (tests/helpers/tiny_workflow.py).

ToyTree's values are enumerable exactly (ToyTree.exact_q), so the search's Q table is
compared with exact values at a tolerance set by the number of visits: 4 standard errors
of the pooled mean, the per-sample std from the exact second moment.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from asct_jax import search as S
from asct_jax.envs.base import EOS_ID, PAD_ID, Environment
from asct_jax.envs.toy_tree import ToyTree
from asct_jax.search.search import node_info, root_active
from tests.helpers import tiny_workflow as tw

ENV = ToyTree(num_actions=4, depth=3)
K = ENV.num_actions


def _logits(seed=0):
    return np.random.default_rng(seed).normal(size=(ENV.num_nodes, K)).astype(np.float32)


def _roots(params, b, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), b)
    states, _ = jax.vmap(ENV.reset, in_axes=(0, None))(keys, params)
    return states


def _rules(selection, expansion=S.uniform_expansion, continuation=S.uniform_continuation):
    return S.SearchRules(selection, expansion, continuation)


UNIFORM_ACTOR = _rules(S.uniform, continuation=S.actor_continuation)   # pi_old suffixes


@functools.lru_cache(maxsize=None)
def _jit_search(rules, config):
    """One compiled search per (rules, config); policy logits and params are traced
    inputs."""

    def fn(params, logits, values, states, key):
        pi = ENV.policy_fn(params, logits, values)
        return S.search(ENV, params, states, pi, key, rules, config)

    return jax.jit(fn)


def _run(rules, config, params, b, logits=None, values=None, seed=0):
    logits = _logits() if logits is None else logits
    values = np.zeros(ENV.num_nodes, np.float32) if values is None else values
    out = _jit_search(rules, config)(
        params, logits, values, _roots(params, b, seed), jax.random.PRNGKey(seed + 1))
    return jax.device_get(out)


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


DEPTH2_UNIFORM = S.SearchConfig(num_simulations=64, max_depth=2, node_policy=True)


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
RULE_CFGS = {  # rule -> (SearchRules, SearchConfig): the paper's, with a depth cap of 3
    "uniform": (_rules(S.uniform), S.SearchConfig(num_simulations=64, max_depth=3)),
    "uct": (_rules(functools.partial(S.uct, c_exp=1.0)), S.SearchConfig(num_simulations=64, max_depth=3)),
    "agentuct": (_rules(functools.partial(S.agentuct, c_exp=1.0, c_tok=0.1),
                        functools.partial(S.cost_weighted_expansion, c_tok=0.1),
                        functools.partial(S.cost_weighted_continuation, c_tok=0.1)),
                 S.SearchConfig(num_simulations=64, max_depth=3)),
    "uniform_actor": (UNIFORM_ACTOR, DEPTH2_UNIFORM),
}


@pytest.fixture(scope="module")
def rule_runs():
    params = ENV.make_params(seed=0)  # costs 1, 3, 9, 27; all 4 root actions legal
    return params, {r: _run(*sc, params, b=32, seed=11) for r, sc in RULE_CFGS.items()}


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


# ------------------------------------------------------------------ search stages
def _model(params, logits=None, values=None):
    logits = _logits() if logits is None else logits
    return S.EnvModel(ENV, params, ENV.policy_fn(params, logits, values))


def _fresh_tree(model, roots, num_nodes):
    """Trees holding only their roots (what `search` starts from)."""
    info = jax.vmap(functools.partial(node_info, model))(roots)
    return S.init_tree(num_nodes, roots, info.prior_logp, info.value, info.legal,
                       info.searchable, info.costs, roots.done)


def _last_selectable(key, node):
    """A custom selection function: always the highest-index selectable candidate."""
    del key
    k = node.mask.shape[0]
    return (k - 1 - jnp.argmax(node.mask[::-1])).astype(jnp.int32)


def _np_tree(tree):
    return {f: np.asarray(getattr(tree, f)) for f in (
        "node_visits", "node_value_sum", "raw_value", "parents", "action_from_parent", "depth",
        "terminal", "children_index", "children_visits", "children_value_sum",
        "children_rewards", "prior_logp", "legal", "searchable", "costs")}


def test_simulate_and_expand_on_a_fresh_tree():
    params = ENV.make_params(seed=1)
    model = _model(params)
    roots = _roots(params, 3)
    roots = roots.replace(done=jnp.array([False, True, False]))
    tree = _fresh_tree(model, roots, num_nodes=4)
    active = np.asarray(root_active(tree))
    assert active.tolist() == [True, False, True]
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    sel = jax.device_get(S.simulate(keys, tree, _last_selectable, 3))
    last = int(np.flatnonzero(np.asarray(params.legal[0]))[-1])
    # An active root: the descent stops at once at the new edge (root, last) to expand.
    assert sel.parent.tolist() == [0, 0, 0] and sel.action[0] == last and sel.action[2] == last
    assert sel.expand.tolist() == [True, False, True] and sel.leaf.tolist() == [-1, 0, -1]
    expanded = jnp.asarray(sel.expand & active)
    tree2 = S.expand(tree, model, jnp.asarray(sel.parent), jnp.asarray(sel.action), jnp.int32(1), expanded)
    t0, t1 = _np_tree(tree), _np_tree(tree2)
    for b in (0, 2):
        assert t1["children_index"][b, 0, last] == 1 and t1["parents"][b, 1] == 0
        assert t1["action_from_parent"][b, 1] == last and t1["depth"][b, 1] == 1
        assert t1["children_rewards"][b, 0, last] == pytest.approx(float(params.rewards[0, last]))
        assert int(tree2.states.node[b, 1]) == last + 1  # ToyTree: child of the root via k is k + 1
        np.testing.assert_array_equal(t1["legal"][b, 1], np.asarray(params.legal[last + 1]))
    for f in t0:  # the tree that did not expand is unchanged; nothing written to slots 2, 3
        np.testing.assert_array_equal(t1[f][1], t0[f][1], err_msg=f)
        np.testing.assert_array_equal(t1[f][:, 2:], t0[f][:, 2:], err_msg=f)
    # Now (root, last) exists: with D = 1 the descent re-evaluates the child, with D = 3
    # it goes through it and stops at a new edge below it.
    s1 = jax.device_get(S.simulate(keys, tree2, _last_selectable, 1))
    assert s1.expand[[0, 2]].tolist() == [False, False] and s1.leaf[[0, 2]].tolist() == [1, 1]
    s3 = jax.device_get(S.simulate(keys, tree2, _last_selectable, 3))
    child_legal = np.asarray(params.legal[last + 1])
    if child_legal.any() and not bool(tree2.terminal[0, 1]):
        assert s3.parent[0] == 1 and s3.expand[0] and s3.action[0] == np.flatnonzero(child_legal)[-1]


def test_backward_updates_exactly_the_path(rule_runs):
    """backward adds one visit and G to the leaf, every ancestor and the edges between
    them, and nothing anywhere else; an inactive tree is unchanged."""
    _, runs = rule_runs
    t = runs["uct"].tree
    tree = jax.tree.map(jnp.asarray, t)
    b = t.node_visits.shape[0]
    used = t.node_visits > 0
    leaf = np.argmax(np.where(used, t.depth, -1), axis=1).astype(np.int32)  # a deepest node
    assert np.all(t.depth[np.arange(b), leaf] >= 2)
    value = np.random.default_rng(0).normal(size=b).astype(np.float32)
    active = np.ones(b, bool)
    active[5] = False
    new, path = S.backward(tree, jnp.asarray(leaf), jnp.asarray(value), jnp.asarray(active), 3)
    n0, n1 = _np_tree(tree), _np_tree(new)
    exp = {f: n0[f].copy() for f in ("node_visits", "node_value_sum", "children_visits", "children_value_sum")}
    for i in np.flatnonzero(active):
        node, g = leaf[i], np.float64(value[i])
        exp["node_visits"][i, node] += 1
        exp["node_value_sum"][i, node] += g
        while node != 0:
            p, a = t.parents[i, node], t.action_from_parent[i, node]
            g += t.children_rewards[i, p, a]
            exp["node_visits"][i, p] += 1
            exp["node_value_sum"][i, p] += g
            exp["children_visits"][i, p, a] += 1
            exp["children_value_sum"][i, p, a] += g
            node = p
    for f in ("node_visits", "children_visits"):
        np.testing.assert_array_equal(n1[f], exp[f], err_msg=f)
    # Visit counts add up: D_leaf + 1 nodes and D_leaf edges per active tree.
    path_len = t.depth[np.arange(b), leaf] * active
    np.testing.assert_array_equal((n1["node_visits"] - n0["node_visits"]).sum(1), path_len + active)
    np.testing.assert_array_equal((n1["children_visits"] - n0["children_visits"]).sum((1, 2)), path_len)
    for f in ("node_value_sum", "children_value_sum"):
        np.testing.assert_allclose(n1[f], exp[f], rtol=1e-6, atol=1e-5, err_msg=f)
        changed = n1[f] != n0[f]
        assert not changed[~active].any()
    for f in n0:
        if f not in exp:
            np.testing.assert_array_equal(n1[f], n0[f], err_msg=f)
    valid = np.asarray(path.valid)
    np.testing.assert_array_equal(valid.sum(1), t.depth[np.arange(b), leaf] * active)
    i = int(np.flatnonzero(active)[0])
    np.testing.assert_array_equal(np.asarray(path.nodes)[i][valid[i]][0], t.parents[i, leaf[i]])


def test_custom_selection_fn_is_used():
    """search follows the selection function it is given (no expansion rule): always the
    last selectable candidate makes one chain per tree, every simulation through the same
    root action; with the uniform expansion rule untried root actions come first."""
    params = ENV.make_params(seed=0)  # all 4 root actions legal
    cfg = S.SearchConfig(num_simulations=8, max_depth=3)
    out = _run(_rules(_last_selectable, None), cfg, params, b=4)
    t = out.tree
    assert np.all(out.visits[:, K - 1] == 8) and np.all(out.visits[:, : K - 1] == 0)
    b, n, a = np.nonzero(t.children_index >= 0)
    last = K - 1 - np.argmax(t.searchable[b, n][:, ::-1], axis=1)
    np.testing.assert_array_equal(a, last)
    assert np.all(np.bincount(b, minlength=4) <= 3)  # a chain: at most D edges per tree
    expanding = _run(_rules(_last_selectable), cfg, params, b=4)
    assert np.all(expanding.visits >= 1)


# ------------------------------------------------------------ root actions, visits
@pytest.mark.slow
@pytest.mark.parametrize("rule", tw.RULES)
def test_every_root_action_first(rule):
    """Trial s writes its expansion at slot s + 1: the first |A(s)| slots are the root's
    children, one per legal root action, so after |A| trials each has exactly 1 visit.
    TinyWorkflow with the root's a0 masked, and (AgentUCT, T_hat = action_costs) ToyTree,
    seed 3: root actions {0, 1, 3} legal."""
    ch = np.asarray(tw.make_params().children).copy()
    ch[0, 0] = -1
    out = jax.device_get(tw.wf_search(rule)(tw.make_params(children=ch), tw.roots([0, 1, 1]),
                                         jax.random.PRNGKey(2)))
    assert np.all(out.tree.parents[:, 1:3] == 0)
    assert np.all(np.sort(out.tree.action_from_parent[:, 1:3], 1) == [1, 2])
    assert np.all(out.visits[:, 0] == 0) and np.all(out.visits.sum(1) == 12)
    if rule != "agentuct":
        return
    params = tw.TOY.make_params(seed=3, legal_prob=0.6)
    legal = np.asarray(params.legal[0])
    out = jax.device_get(tw.toy_search(rule, 12)(params, tw.toy_roots(params, 8), jax.random.PRNGKey(1)))
    na = int(legal.sum())
    assert na == 3
    t = out.tree
    assert np.all(t.parents[:, 1:na + 1] == 0)
    for b in range(8):
        assert sorted(t.action_from_parent[b, 1:na + 1]) == list(np.flatnonzero(legal))
    assert np.all(out.visits.sum(1) == 12) and np.all(out.visits[:, legal] >= 1)


KEEP_ROOT = st.lists(st.booleans(), min_size=3, max_size=3).filter(any)
KEEP_INNER = st.lists(st.sampled_from([(True, True), (True, False), (False, True)]),
                      min_size=3, max_size=3)


def _masked(keep_root, keep_inner):
    """TinyWorkflow with the candidates of the root (keep_root [3]) and of prefixes 1, 2, 5
    (keep_inner: 3 x which of their 2 children) masked; each keeps >= 1 legal child."""
    ch = np.asarray(tw.make_params().children).copy()
    ch[0] = np.where(keep_root, ch[0], -1)
    for node, kp in zip((1, 2, 5), keep_inner):
        ch[node, :2] = np.where(kp, ch[node, :2], -1)
    return ch, tw.make_params(children=ch)


@settings(max_examples=10)
@given(b=st.sampled_from([4, 12]), rule=st.sampled_from(tw.RULES), keep_root=KEEP_ROOT,
       keep_inner=KEEP_INNER, seed=st.integers(0, 999))
@pytest.mark.slow
def test_visit_counts_add_up_on_a_workflow(b, rule, keep_root, keep_inner, seed):
    """Drawn: B in {4, 12}, the rule, the legal root actions (|A| in 1..3) and inner
    candidates of TinyWorkflow, the key. Root visits sum to B, every legal root action is
    tried (B > |A|), and every expanded non-terminal node has 1 + the sum of its children's
    visits (no depth cap); an edge's visits are its child's."""
    ch, params = _masked(keep_root, keep_inner)
    out = jax.device_get(tw.wf_search(rule, b)(params, tw.roots([0, 1, 0]), jax.random.PRNGKey(seed)))
    t = out.tree
    legal = ch[0] >= 0
    assert np.all(out.visits.sum(1) == b) and np.all(t.node_visits[:, 0] == b)
    assert np.all(out.visits[:, legal] >= 1) and np.all(out.visits[:, ~legal] == 0)
    used = t.node_visits > 0
    used[:, 0] = False
    inner = used & ~t.terminal & t.searchable.any(-1)
    assert np.all(t.node_visits[inner] == 1 + t.children_visits.sum(-1)[inner])
    bb, n, a = np.nonzero(t.children_index >= 0)
    assert np.all(t.children_visits[bb, n, a] == t.node_visits[bb, t.children_index[bb, n, a]])
    np.testing.assert_allclose(out.search_value, (out.q * out.visits).sum(1) / b, atol=1e-5)


# --------------------------------------------------------------------------- masks
@settings(max_examples=10)
@given(keep_root=KEEP_ROOT, keep_inner=KEEP_INNER, rule=st.sampled_from(tw.RULES),
       seed=st.integers(0, 999))
def test_masks_really_mask(keep_root, keep_inner, rule, seed):
    """Drawn: the legal candidates as in test_visit_counts_add_up, the rule, the key.
    Illegal root actions are never visited, tree edges are legal, and no continuation
    takes an illegal action (it would return -100)."""
    ch, params = _masked(keep_root, keep_inner)
    out = jax.device_get(tw.wf_search(rule)(params, tw.roots([0, 1, 0]), jax.random.PRNGKey(seed)))
    legal = ch[0] >= 0
    assert np.all(out.visits[:, ~legal] == 0) and np.all(~out.q_mask[:, ~legal])
    t = out.tree
    b, n, a = np.nonzero(t.children_index >= 0)
    assert np.all(ch[t.states.node[b, n], a] >= 0)
    assert np.all(out.q >= 0) and np.all(t.children_value_sum >= 0)


# --------------------------------------------------------------- UCT vs AgentUCT
@settings(max_examples=10)
@given(b=st.sampled_from([4, 12]), u01=st.tuples(st.floats(0, 0.85), st.floats(0, 0.85)),
       gap=st.floats(0.05, 0.15), c_big=st.floats(4e4, 1e5), seed=st.integers(0, 999))
def test_uct_and_agentuct_visit_differently(b, u01, gap, c_big, seed):
    """Drawn: B in {4, 12} (> |A| = 3), the utilities u0, u1 in [0, 0.85] of the cheap root
    actions, the expensive action's margin u2 = max(u0, u1) + gap, its nominal tokens
    c_big in [4e4, 1e5], the key. After the 3 forced first tries U_bar = u exactly; UCT
    then takes a2 (the best, equal bonuses), while AgentUCT never does again:
    c_tok T_hat(a2) >= 4 exceeds any bonus gap + utility gap (<= 1.4 sqrt(log 13) + 1)."""
    u = [u01[0], u01[1], max(u01) + gap]
    params = tw.cost_tree(c_big, u)
    st_ = tw.roots([0, 1, 1])
    key = jax.random.PRNGKey(seed)
    out_uct = jax.device_get(tw.wf_search("uct", b)(params, st_, key))
    out_agent = jax.device_get(tw.wf_search("agentuct", b)(params, st_, key))
    assert np.all(out_uct.visits[:, 2] >= 2)
    assert np.all(out_agent.visits[:, 2] == 1)
    assert np.all(out_uct.visits.sum(1) == b) and np.all(out_agent.visits.sum(1) == b)
    np.testing.assert_allclose(out_agent.q[:, 2], u[2], rtol=1e-6)
    assert np.all(out_agent.env_tokens < out_uct.env_tokens)
