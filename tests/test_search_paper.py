"""Tests of the ASCT paper's search (selection rules uniform / uct / agentuct, T_hat, the
execution cache, continuations) on ToyTree and on a tiny deterministic staged workflow
built here (`TinyWorkflow`, independent of the real workflow environments).

TinyWorkflow's WorkflowTree (P = 10 prefixes, K = 3 candidates; -> child, [nominal tokens]):

    0 -a0-> 1 [10]  -a0-> 3 (T) [1]
                    -a1-> 4 (T) [3]
      -a1-> 2 [20]  -a0-> 5 [5]  -a0-> 6 (T) [2]
                                 -a1-> 7 (T) [4]
                    -a1-> 8 (T) [7]
      -a2-> 9 (T) [30]

Reward: utility[q, p] on reaching a terminal prefix p, else 0; an illegal candidate ends
the episode with reward -100 (so an illegal continuation step shows in Q). Realized cost
of (p, a) for question q: edge_tokens[p, a] + q (the ledger charges these, T_hat reads the
nominal edge_tokens).
"""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from asct_jax import search as S
from asct_jax.envs.base import BOS_ID, EOS_ID, PAD_ID, Environment, WorkflowTree
from asct_jax.envs.toy_tree import ToyTree
from asct_jax.search import cache as C

P, K, Q = 10, 3, 2
POISON = -100.0


@chex.dataclass(frozen=True)
class WFParams:
    children: chex.Array    # [P, K] i32
    terminal: chex.Array    # [P] bool
    edge_tokens: chex.Array  # [P, K] f32
    depth: chex.Array       # [P] i32
    utility: chex.Array     # [Q, P] f32


@chex.dataclass(frozen=True)
class WFState:
    qid: chex.Array
    node: chex.Array
    turn: chex.Array
    done: chex.Array
    key: chex.PRNGKey


class TinyWorkflow(Environment):
    name = "tiny_workflow"
    num_actions, action_len, obs_len, feedback_len, max_turns = K, 3, 6, 2, 3

    def default_params(self):
        return make_params()

    def reset_env(self, key, params):
        return WFState(qid=jnp.int32(0), node=jnp.int32(0), turn=jnp.int32(0),
                       done=jnp.array(False), key=key)

    def step_env(self, state, action, key, params):
        k = jnp.clip(action[0] - 5, 0, K - 1)
        child = params.children[state.node, k]
        ok = child >= 0
        node = jnp.where(ok, child, state.node)
        term = ok & params.terminal[node]
        reward = jnp.where(ok, jnp.where(term, params.utility[state.qid, node], 0.0), POISON)
        fb = jnp.array([5, EOS_ID], jnp.int32)
        return state.replace(node=node, done=term | ~ok), fb, reward.astype(jnp.float32)

    def observe(self, state, params):
        return jnp.array([BOS_ID, 16 + state.node, 8 + state.turn, EOS_ID, PAD_ID, PAD_ID],
                         jnp.int32)

    def info(self, state, params):
        return {"success": jnp.float32(0.0), "score": jnp.float32(0.0)}

    def legal_actions(self, state, params):
        cands = jnp.stack([jnp.arange(K) + 5, jnp.full((K,), EOS_ID), jnp.full((K,), PAD_ID)], 1)
        return cands.astype(jnp.int32), (params.children[state.node] >= 0) & ~state.done

    def action_costs(self, state, params):
        return params.edge_tokens[state.node] + state.qid.astype(jnp.float32)

    def workflow(self, params):
        return WorkflowTree(params.children, params.terminal, params.edge_tokens, params.depth)

    def workflow_node(self, state, params):
        return state.node

    def question_id(self, state, params):
        return state.qid

    def num_questions(self, params):
        return Q


WF = TinyWorkflow()


def make_params(children=None, edge=None, utility=None):
    """The module docstring's tree (or the given tables)."""
    if children is None:
        children = np.full((P, K), -1)
        children[0] = [1, 2, 9]
        children[1, :2] = [3, 4]
        children[2, :2] = [5, 8]
        children[5, :2] = [6, 7]
    if edge is None:
        edge = np.zeros((P, K))
        edge[0], edge[1, :2], edge[2, :2], edge[5, :2] = [10, 20, 30], [1, 3], [5, 7], [2, 4]
    if utility is None:
        utility = np.linspace(0.1, 0.9, Q * P).reshape(Q, P)
    children = np.asarray(children)
    terminal = np.zeros(P, bool)
    depth = np.zeros(P, np.int32)
    for p in range(P):  # parents have lower ids
        for c in children[p]:
            if c >= 0:
                depth[c] = depth[p] + 1
    reached = np.isin(np.arange(P), children[children >= 0])
    terminal = reached & np.all(children < 0, axis=1)
    return WFParams(children=jnp.asarray(children, jnp.int32), terminal=jnp.asarray(terminal),
                    edge_tokens=jnp.asarray(np.where(children >= 0, edge, 0), jnp.float32),
                    depth=jnp.asarray(depth), utility=jnp.asarray(utility, jnp.float32))


def roots(qids, key=0):
    qids = jnp.asarray(qids, jnp.int32)
    b = qids.shape[0]
    keys = jax.random.split(jax.random.PRNGKey(key), b)
    return WFState(qid=qids, node=jnp.zeros(b, jnp.int32), turn=jnp.zeros(b, jnp.int32),
                   done=jnp.zeros(b, bool), key=keys)


def uniform_policy(env, params):
    def pi(state):
        _, legal = env.legal_actions(state, params)
        return jnp.where(legal, -jnp.log(jnp.maximum(legal.sum(), 1.0)), -jnp.inf), jnp.float32(0)
    return pi


def prefix_costs(params, q):
    """[P] realized cost of the edge into each prefix of question q (0 for the root)."""
    ch, edge = np.asarray(params.children), np.asarray(params.edge_tokens)
    out = np.zeros(P)
    for p in range(P):
        for k in range(K):
            if ch[p, k] >= 0:
                out[ch[p, k]] = edge[p, k] + q
    return out


class _Counted:
    """A policy_fn wrapper that counts its (trace-time) calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, state):
        self.calls += 1
        return self.fn(state)


@functools.lru_cache(maxsize=None)
def wf_search(rule, b=12, actor=False):
    """One jitted paper search per (rule, B, continuation) on TinyWorkflow; params, roots,
    key and cache are traced inputs (cache=None is its own pytree structure).
    fn.policy counts the policy_fn calls of the last trace, fn.traces the traces.
    The tests search batches of 3 roots, so that they share compilations."""
    cfg = S.paper_config(rule, num_simulations=b, actor_rollout=actor)

    @jax.jit
    def fn(params, states, key, cache=None):
        fn.traces += 1
        fn.policy = _Counted(uniform_policy(WF, params))
        return S.search(WF, params, states, fn.policy, key, S.make_selection(rule), cfg,
                        cache=cache)

    fn.traces = 0
    return fn


TOY = ToyTree(num_actions=4, depth=3)


@functools.lru_cache(maxsize=None)
def toy_search(rule, b):
    cfg = S.paper_config(rule, num_simulations=b)

    @jax.jit
    def fn(params, states, key):
        pi = TOY.policy_fn(params, jnp.zeros((TOY.num_nodes, 4)))
        return S.search(TOY, params, states, pi, key, S.make_selection(rule), cfg)

    return fn


def toy_roots(params, b, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), b)
    return jax.vmap(TOY.reset, in_axes=(0, None))(keys, params)[0]


RULES = ("uniform", "uct", "agentuct")


# ------------------------------------------------------------------------- kernels
def test_agentuct_scores_by_hand():
    # u_bar = [0.5, 0.8, 0.0], n(v) = 3, n(v,a) = [2, 1, 0], T_hat = [1000, 5000, 10]:
    #   log(3 + 1) = 1.3862944
    #   S(0) = 0.5 + 1.4 sqrt(1.3862944 / 2) - 1e-4 * 1000 = 0.5 + 1.1655765 - 0.1 = 1.5655765
    #   S(1) = 0.8 + 1.4 sqrt(1.3862944 / 1) - 1e-4 * 5000 = 0.8 + 1.6483740 - 0.5 = 1.9483740
    #   S(2) = +inf (untried)
    u, n, t = jnp.array([0.5, 0.8, 0.0]), jnp.array([2, 1, 0]), jnp.array([1000.0, 5000.0, 10.0])
    s = np.asarray(S.agentuct_scores(u, jnp.int32(3), n, t, c_exp=1.4, c_tok=1e-4))
    np.testing.assert_allclose(s[:2], [1.5655765, 1.9483740], rtol=1e-6)
    assert s[2] == np.inf
    np.testing.assert_allclose(np.asarray(S.uct_scores(u, jnp.int32(3), n))[:2],
                               [1.6655765, 2.4483740], rtol=1e-6)
    # Batched [..., K] with n_node [...]; the defaults are c_exp = 1.4, c_tok = 1e-4.
    sb = S.agentuct_scores(jnp.stack([u, u]), jnp.array([3, 3]), jnp.stack([n, n]), jnp.stack([t, t]))
    np.testing.assert_allclose(np.asarray(sb), np.stack([s, s]), rtol=1e-6)
    # The rule takes the argmax of S once every child is tried: a1 here.
    node = _stats([2, 1, 1], [1.0, 0.8, 0.0], t_hat=[1000.0, 5000.0, 10.0], visits=3)
    assert int(jax.jit(S.agentuct)(jax.random.PRNGKey(0), node)) == 1


def _stats(child_visits, vsum, mask=None, t_hat=None, visits=None):
    k = len(child_visits)
    return S.NodeStats(
        child_visits=jnp.asarray(child_visits, jnp.int32), child_value_sum=jnp.asarray(vsum, jnp.float32),
        prior_logp=jnp.zeros(k), mask=jnp.asarray([True] * k if mask is None else mask),
        costs=jnp.ones(k), value=jnp.float32(0.0),
        t_hat=None if t_hat is None else jnp.asarray(t_hat, jnp.float32),
        visits=None if visits is None else jnp.int32(visits))


def _picks(rule, node, n=400):
    keys = jax.random.split(jax.random.PRNGKey(7), n)
    return np.asarray(jax.jit(jax.vmap(rule, in_axes=(0, None)))(keys, node))


def test_uniform_least_visited_and_ties_at_random():
    # Fully expanded: the least-visited selectable child (a3 is masked).
    assert set(_picks(S.uniform, _stats([3, 1, 2, 1], [0, 5, 0, 9], [True, True, True, False]))) == {1}
    # Ties among the least visited at random, both taken.
    assert set(_picks(S.uniform, _stats([2, 1, 1, 3], [9, 0, 0, 0]))) == {1, 2}


def test_untried_first_and_cost_weighted_expansion():
    """Untried children score +inf: UCT draws them uniformly, AgentUCT with probability
    proportional to exp(-c_tok T_hat): [1, e^-1, e^-2] / sum for T_hat [0, 1e4, 2e4]."""
    node = _stats([0, 0, 0, 4], [0, 0, 0, 40], t_hat=[0.0, 1e4, 2e4, 0.0], visits=4)
    freq_uct = np.bincount(_picks(S.uct, node, 3000), minlength=4) / 3000
    np.testing.assert_allclose(freq_uct, [1 / 3, 1 / 3, 1 / 3, 0], atol=0.04)
    freq = np.bincount(_picks(S.agentuct, node, 3000), minlength=4) / 3000
    p = np.exp(-np.arange(3.0)) / np.exp(-np.arange(3.0)).sum()
    np.testing.assert_allclose(freq, [*p, 0], atol=0.04)


# --------------------------------------------------------------------------- T_hat
def test_t_hat_on_a_hand_built_workflow_tree():
    """Paths below 2: 2-5-6 (5 + 2), 2-5-7 (5 + 4), 2-8 (7): each path weighs 1/3."""
    p = make_params()
    wf = WF.workflow(p)
    table = jax.jit(C.t_hat_table, static_argnums=2)
    t = lambda cached: np.asarray(table(wf, jnp.isin(jnp.arange(P), jnp.asarray(cached, jnp.int32)), 4))
    t0 = t([])
    np.testing.assert_allclose(t0[0], [10 + (1 + 3) / 2, 20 + (7 + 9 + 7) / 3, 30], rtol=1e-6)
    np.testing.assert_allclose(t0[2], [5 + (2 + 4) / 2, 7, 0], rtol=1e-6)
    np.testing.assert_allclose(t0[1], [1, 3, 0])
    np.testing.assert_allclose(t0[5], [2, 4, 0])
    assert np.all(t0[[3, 4, 6, 7, 8, 9]] == 0)
    # Prefixes 2, 5, 6 cached: only 5-7 (4) and 2-8 (7) are still paid.
    t1 = t([2, 5, 6])
    np.testing.assert_allclose(t1[0], [12, 0 + (0 + 4 + 7) / 3, 30], rtol=1e-6)
    np.testing.assert_allclose(t1[2], [0 + (0 + 4) / 2, 7, 0], rtol=1e-6)
    np.testing.assert_allclose(t1[5], [0, 4, 0])
    # Prefix 1 cached: T_hat(0, a0) = 0 + (1 + 3) / 2.
    np.testing.assert_allclose(t([1])[0, 0], 2.0)
    n, mean = jax.jit(C.suffix_costs, static_argnums=2)(wf, jnp.zeros(P, bool), 4)
    np.testing.assert_allclose(np.asarray(n)[[0, 1, 2, 5, 9]], [6, 2, 3, 2, 1])
    # The search's T_hat of the root node reads the tree's question row of the cache.
    cache = S.init_cache(WF, p)
    cache = cache.replace(executed=cache.executed.at[1, jnp.array([2, 5, 6])].set(True))
    tree = S.init_tree(2, roots([0, 1]), jnp.zeros((2, K)), jnp.zeros(2), jnp.ones((2, K), bool),
                       jnp.ones((2, K), bool), jnp.ones((2, K)), jnp.zeros(2, bool))
    model = S.EnvModel(WF, p, uniform_policy(WF, p))
    _, node_t = jax.jit(lambda tr, c: S.remaining_costs(model, tr, jnp.array([0, 1]), c))(tree, cache)
    np.testing.assert_allclose(np.asarray(node_t[:, 0]), [t0[0], t1[0]], rtol=1e-6)


def test_t_hat_without_a_workflow_is_action_costs():
    params = TOY.make_params(seed=0)
    tree = S.init_tree(3, toy_roots(params, 2), jnp.zeros((2, 4)), jnp.zeros(2), jnp.ones((2, 4), bool),
                       jnp.ones((2, 4), bool), jnp.broadcast_to(params.costs, (2, 4)), jnp.zeros(2, bool))
    model = S.EnvModel(TOY, params, TOY.policy_fn(params, jnp.zeros((TOY.num_nodes, 4))))
    table, node_t = S.remaining_costs(model, tree, jnp.zeros(2, jnp.int32), None)
    assert table is None and S.init_cache(TOY, params) is None
    np.testing.assert_array_equal(np.asarray(node_t), np.asarray(tree.costs))


# ------------------------------------------------------------ root actions, visits
@pytest.mark.parametrize("rule", RULES)
def test_every_root_action_first(rule):
    """Trial s writes its expansion at slot s + 1: the first |A(s)| slots are the root's
    children, one per legal root action, so after |A| trials each has exactly 1 visit.
    TinyWorkflow with the root's a0 masked, and (AgentUCT, T_hat = action_costs) ToyTree,
    seed 3: root actions {0, 1, 3} legal."""
    ch = np.asarray(make_params().children).copy()
    ch[0, 0] = -1
    out = jax.device_get(wf_search(rule)(make_params(children=ch), roots([0, 1, 1]),
                                         jax.random.PRNGKey(2)))
    assert np.all(out.tree.parents[:, 1:3] == 0)
    assert np.all(np.sort(out.tree.action_from_parent[:, 1:3], 1) == [1, 2])
    assert np.all(out.visits[:, 0] == 0) and np.all(out.visits.sum(1) == 12)
    if rule != "agentuct":
        return
    params = TOY.make_params(seed=3, legal_prob=0.6)
    legal = np.asarray(params.legal[0])
    out = jax.device_get(toy_search(rule, 12)(params, toy_roots(params, 8), jax.random.PRNGKey(1)))
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
    ch = np.asarray(make_params().children).copy()
    ch[0] = np.where(keep_root, ch[0], -1)
    for node, kp in zip((1, 2, 5), keep_inner):
        ch[node, :2] = np.where(kp, ch[node, :2], -1)
    return ch, make_params(children=ch)


@settings(max_examples=10)
@given(b=st.sampled_from([4, 12]), rule=st.sampled_from(RULES), keep_root=KEEP_ROOT,
       keep_inner=KEEP_INNER, seed=st.integers(0, 999))
def test_visit_counts_add_up(b, rule, keep_root, keep_inner, seed):
    """Drawn: B in {4, 12}, the rule, the legal root actions (|A| in 1..3) and inner
    candidates of TinyWorkflow, the key. Root visits sum to B, every legal root action is
    tried (B > |A|), and every expanded non-terminal node has 1 + the sum of its children's
    visits (no depth cap); an edge's visits are its child's."""
    ch, params = _masked(keep_root, keep_inner)
    out = jax.device_get(wf_search(rule, b)(params, roots([0, 1, 0]), jax.random.PRNGKey(seed)))
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
@given(keep_root=KEEP_ROOT, keep_inner=KEEP_INNER, rule=st.sampled_from(RULES),
       seed=st.integers(0, 999))
def test_masks_really_mask(keep_root, keep_inner, rule, seed):
    """Drawn: the legal candidates as in test_visit_counts_add_up, the rule, the key.
    Illegal root actions are never visited, tree edges are legal, and no continuation
    takes an illegal action (it would return -100)."""
    ch, params = _masked(keep_root, keep_inner)
    out = jax.device_get(wf_search(rule)(params, roots([0, 1, 0]), jax.random.PRNGKey(seed)))
    legal = ch[0] >= 0
    assert np.all(out.visits[:, ~legal] == 0) and np.all(~out.q_mask[:, ~legal])
    t = out.tree
    b, n, a = np.nonzero(t.children_index >= 0)
    assert np.all(ch[t.states.node[b, n], a] >= 0)
    assert np.all(out.q >= 0) and np.all(t.children_value_sum >= 0)


# --------------------------------------------------------------- UCT vs AgentUCT
def _cost_tree(c_big, u):
    """Root a0, a1, a2 (nominal tokens 10, 10, c_big) -> prefixes 1, 2, 3, each with one
    terminal child 4, 5, 6 (1 token); utility u[a] at the terminal under a."""
    ch = np.full((P, K), -1)
    ch[0] = [1, 2, 3]
    ch[1, 0], ch[2, 0], ch[3, 0] = 4, 5, 6
    edge = np.zeros((P, K))
    edge[0] = [10, 10, c_big]
    edge[1:4, 0] = 1
    util = np.zeros((Q, P))
    util[:, 4:7] = u
    return make_params(children=ch, edge=edge, utility=util)


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
    params = _cost_tree(c_big, u)
    st_ = roots([0, 1, 1])
    key = jax.random.PRNGKey(seed)
    out_uct = jax.device_get(wf_search("uct", b)(params, st_, key))
    out_agent = jax.device_get(wf_search("agentuct", b)(params, st_, key))
    assert np.all(out_uct.visits[:, 2] >= 2)
    assert np.all(out_agent.visits[:, 2] == 1)
    assert np.all(out_uct.visits.sum(1) == b) and np.all(out_agent.visits.sum(1) == b)
    np.testing.assert_allclose(out_agent.q[:, 2], u[2], rtol=1e-6)
    assert np.all(out_agent.t_env < out_uct.t_env)


def test_continuations_follow_their_policy():
    """4000 continuations from the root of _cost_tree(1e4) (T_hat(0, .) = [11, 11, 10001]):
    a cost-weighted one takes a first with P(a) ~ exp(-1e-4 T_hat(0, a)), a uniform one
    1/3 each; the trace lists the prefixes executed and their realized tokens (+ q = 1)."""
    from asct_jax.search.search import continue_episode

    params = _cost_tree(1e4, [0.1, 0.2, 0.3])
    model = S.EnvModel(WF, params, uniform_policy(WF, params))
    state = jax.tree.map(lambda x: x[0], roots([1]))
    table = jax.jit(C.t_hat_table, static_argnums=2)(WF.workflow(params), jnp.zeros(P, bool), 4)
    np.testing.assert_allclose(np.asarray(table[0]), [11, 11, 10001])
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    w = np.exp(-1e-4 * np.array([11.0, 11.0, 10001.0]))
    for cont, prob in (("cost_weighted", w / w.sum()), ("uniform", np.full(3, 1 / 3))):
        cfg = S.SearchConfig(continuation=cont, max_depth=None)
        g, cost, trace = jax.device_get(jax.jit(jax.vmap(
            lambda k: continue_episode(model, cfg, state, k, table)))(keys))
        a = trace.prefix[:, 0] - 1
        np.testing.assert_allclose(np.bincount(a, minlength=3) / 4000, prob, atol=0.03)
        assert np.all(trace.valid[:, :2]) and not np.any(trace.valid[:, 2])
        np.testing.assert_array_equal(trace.prefix[:, 1], a + 4)
        np.testing.assert_allclose(trace.tokens[:, 0], np.array([11.0, 11.0, 1e4 + 1])[a])
        np.testing.assert_allclose(trace.tokens[:, 1], 2.0)
        np.testing.assert_allclose(g, np.array([0.1, 0.2, 0.3])[a], rtol=1e-6)
        np.testing.assert_allclose(cost.aux_tokens, trace.tokens.sum(1))
        assert np.all(cost.env_calls == 2) and np.all(cost.actor_tokens == 0)


# ---------------------------------------------------------------------------- cache
def test_cache_charges_a_repeated_prefix_once():
    """The same root searched again and again with the cache carried: each search pays
    exactly the prefixes it executes for the first time (realized cost, one env call
    each); once every prefix is cached (9 of them, all but the root) a search pays
    nothing and still runs B = 12 trials. (Tree 0 is question 1's only tree; trees 1, 2 of
    question 0 do not touch its cache row.)"""
    params = make_params()
    fn = wf_search("uniform")
    cache0 = S.init_cache(WF, params)
    assert cache0.executed.shape == (Q, P) and not cache0.executed.any()
    r = roots([1, 0, 0])
    cost1 = prefix_costs(params, 1)
    cache, outs = cache0, []
    for i in range(6):
        out = jax.device_get(fn(params, r, jax.random.PRNGKey(i), cache))
        new = np.asarray(out.cache.executed)[1] & ~np.asarray(cache.executed)[1]
        np.testing.assert_allclose(out.t_env[0], cost1[new].sum(), rtol=1e-6)
        assert out.env_calls[0] == new.sum() and np.all(out.visits.sum(1) == 12)
        assert np.all(out.aux_tokens == out.t_env) and np.all(out.t_actor == 0)
        cache, outs = out.cache, outs + [out]
        if np.asarray(cache.executed)[1, 1:].all():
            break
    assert np.asarray(cache.executed)[1, 1:].all() and not np.asarray(cache.executed)[1, 0]
    assert outs[0].t_env[0] > 0
    # Fully cached paths cost nothing; the trials still run.
    out = jax.device_get(fn(params, r, jax.random.PRNGKey(99), cache))
    assert out.t_env[0] == 0 and out.env_calls[0] == 0 and np.all(out.visits.sum(1) == 12)
    # Without a cache the first search's trials pay every executed edge (traversal).
    out0 = jax.device_get(fn(params, r, jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(out0.visits, outs[0].visits)
    assert out0.cache is None and np.all(out0.t_env > outs[0].t_env)
    assert np.all(out0.env_calls > outs[0].env_calls)
    # A partial hit: prefix 2 cached beforehand, the first search pays all but it.
    part = cache0.replace(executed=cache0.executed.at[1, 2].set(True))
    out3 = jax.device_get(fn(params, r, jax.random.PRNGKey(0), part))
    np.testing.assert_allclose(out3.t_env[0], outs[0].t_env[0] - cost1[2], rtol=1e-6)


def test_parallel_trees_of_one_question_charge_a_shared_prefix_once():
    """B = 3 trees in one call: two of question 0, one of question 1. Per question, the
    trees' t_env sums to the realized cost of its executed prefixes, each counted once
    (the lowest tree index pays a prefix both execute in the same step)."""
    params = make_params()
    fn = wf_search("uniform")
    out = jax.device_get(fn(params, roots([0, 0, 1]), jax.random.PRNGKey(3), S.init_cache(WF, params)))
    ex = np.asarray(out.cache.executed)
    for q, trees in ((0, [0, 1]), (1, [2])):
        np.testing.assert_allclose(out.t_env[trees].sum(), prefix_costs(params, q)[ex[q]].sum(), rtol=1e-6)
        assert out.env_calls[trees].sum() == ex[q].sum()
    alone = jax.device_get(fn(params, roots([0, 1, 1]), jax.random.PRNGKey(3),
                              S.init_cache(WF, params))).t_env[0]
    assert out.t_env[:2].sum() < 2 * alone  # the two q0 trees share their prefixes
    traces = fn.traces
    # A chain 0 -> 1 -> 3: in the first step both trees execute the same two prefixes; the
    # lower index pays them, the other tree nothing; later trials are cached.
    ch = np.full((P, K), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    chain = make_params(children=ch)
    out = jax.device_get(fn(chain, roots([0, 0, 1]), jax.random.PRNGKey(4), S.init_cache(WF, chain)))
    np.testing.assert_allclose(out.t_env, [10 + 1, 0, 10 + 1 + 1 + 1])  # realized: + q per edge
    np.testing.assert_array_equal(out.env_calls, [2, 0, 2])
    assert np.all(out.visits.sum(1) == 12)
    fn(params, roots([1, 0, 1]), jax.random.PRNGKey(5), out.cache)
    assert fn.traces == traces  # compiled once: new params, caches and keys are inputs


def test_actor_continuations_cost_actor_tokens_and_rules_do_not_call_the_actor():
    """Chain 0 -> 1 -> 3, B = 12: trial 1 expands 1 and continues with one actor decision
    at 1 (4 non-PAD observation tokens + 1 legal candidate of 2 tokens = 6); trial 2
    expands the terminal 3; every later trial revisits it. Trees 1 and 2 share question 1,
    and the actor's scoring at its prefix 1 is charged once (to tree 1: the cache's
    "scored" namespace, the paper's VinePPO ledger). A rule continuation calls
    policy_fn only for the root prior."""
    ch = np.full((P, K), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    chain = make_params(children=ch)
    fn = wf_search("agentuct", actor=True)
    out = jax.device_get(fn(chain, roots([0, 1, 1]), jax.random.PRNGKey(0), S.init_cache(WF, chain)))
    np.testing.assert_allclose(out.t_actor, [6, 6, 0])
    np.testing.assert_allclose(out.t_env, [11, 13, 0])  # realized: edge tokens + q per edge
    np.testing.assert_allclose(out.aux_tokens, out.t_env + out.t_actor)
    assert fn.policy.calls > 1
    rule_fn = wf_search("agentuct")
    out = jax.device_get(rule_fn(chain, roots([0, 1, 1]), jax.random.PRNGKey(0)))
    assert rule_fn.policy.calls == 1 and np.all(out.t_actor == 0)
    assert np.all(np.isfinite(out.prior_logp[:, 0])) and np.all(out.prior_logp[:, 1:] == -np.inf)


def test_config_fields():
    cfg = S.paper_config("agentuct")
    assert (cfg.num_simulations, cfg.max_depth, cfg.expansion, cfg.continuation, cfg.leaf_eval) == (
        12, None, "cost_weighted", "cost_weighted", "rollout")
    assert S.paper_config("uct", actor_rollout=True).continuation == "actor"
    assert S.make_search_config({"c_tok": 2e-4, "c_exp": 1.0}).c_tok == 2e-4  # c_exp: the rule's
    assert S.make_selection("agentuct", {"c_tok": 2e-4, "c_exp": 1.0, "c": 3.0}).keywords == {
        "c_exp": 1.0, "c_tok": 2e-4}
    for field, value in (("expansion", "prior_order"), ("continuation", "pi"), ("c_tok", -1.0),
                         ("max_depth", 0)):
        with pytest.raises(ValueError, match=field):
            S.make_search_config({field: value})
    with pytest.raises(ValueError, match="c_exp"):
        S.make_selection("uct", c_exp=-1.0)
    with pytest.raises(ValueError, match="staged workflow"):
        params = TOY.make_params(seed=0)
        S.search(TOY, params, toy_roots(params, 1), TOY.policy_fn(params, jnp.zeros((TOY.num_nodes, 4))),
                 jax.random.PRNGKey(0), S.uniform, cfg, cache=S.init_cache(WF, make_params()))
