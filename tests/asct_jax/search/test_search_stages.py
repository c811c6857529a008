"""Tests of asct_jax.search's loop stage by stage, on ToyTree (tests/helpers/toy_search.py):
simulate and expand on a fresh tree, backward on a searched one (the fixture rule_runs),
and search following a custom selection function.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax import search as S
from asct_jax.search.search import node_info, root_active
from tests.helpers.toy_search import (  # noqa: F401 (rule_runs: a module-scoped fixture)
    ENV, K, make_rules as _rules, random_logits as _logits, roots as _roots, rule_runs,
    run_search as _run)


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
