"""Tests of asct_jax.search's loop on TinyWorkflow (tests/helpers/tiny_workflow.py) with the
paper's rules: every legal root action is tried first, visit counts add up with masked
candidates, masked candidates are never taken, and UCT and AgentUCT treat an expensive
best action differently.
"""
import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.helpers import tiny_workflow as tw


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
