"""Tests of asct_jax.search.tree: init_tree (the roots written at node 0 of B preallocated
trees and every other slot empty: no parent, UNVISITED children, -inf priors, zero
statistics, the states' leaves [B, N, ...] zero past the root; raw_value 0 at a terminal
root; the shapes and dtypes of the Tree docstring, the shape checks), Tree's sizes and
qvalues (Qbar = children_value_sum / children_visits at the node each tree asks for, 0
where unvisited: a hand case and a NumPy reference), and the module docstring's layout
and value statistics on a searched ToyTree (the value sum of an edge = its visits x its
reward + the child's value sum, the root's = the sum over its edges; a child written after
its parent, at most one slot per simulation, unused slots empty).

The visit-count invariants of searched trees and the backup step by step are in
test_search.py and test_search_stages.py.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from asct_jax.search.tree import NO_PARENT, ROOT_INDEX, UNVISITED, Tree, init_tree
from tests.helpers.tiny_workflow import TOY, toy_roots, toy_search

B, N, K = 3, 5, 4
_init = jax.jit(init_tree, static_argnums=0)
_qvalues = jax.jit(lambda tree, index: tree.qvalues(index))

# Tree field -> (trailing shape after [B], dtype) as the Tree docstring lists them.
FIELDS = {
    "node_visits": ("N", jnp.int32), "node_value_sum": ("N", jnp.float32),
    "raw_value": ("N", jnp.float32), "parents": ("N", jnp.int32),
    "action_from_parent": ("N", jnp.int32), "depth": ("N", jnp.int32),
    "terminal": ("N", jnp.bool_), "children_index": ("NK", jnp.int32),
    "children_visits": ("NK", jnp.int32), "children_value_sum": ("NK", jnp.float32),
    "children_rewards": ("NK", jnp.float32), "prior_logp": ("NK", jnp.float32),
    "legal": ("NK", jnp.bool_), "searchable": ("NK", jnp.bool_), "costs": ("NK", jnp.float32),
}


def _root_inputs(seed, b=B, k=K):
    """Random root arrays of init_tree (prior -inf where illegal, searchable within legal)
    and ToyTree root states with random nodes, returns and done flags."""
    rng = np.random.default_rng(seed)
    legal = rng.random((b, k)) < 0.7
    prior = np.where(legal, rng.normal(size=(b, k)), -np.inf).astype(np.float32)
    terminal = rng.random(b) < 0.4
    params = TOY.make_params(seed=0)
    states = toy_roots(params, b, seed).replace(
        node=jnp.asarray(rng.integers(0, TOY.num_nodes, b), jnp.int32),
        ret=jnp.asarray(rng.normal(size=b), jnp.float32), done=jnp.asarray(terminal))
    return dict(root_states=states, root_prior_logp=prior,
                root_value=rng.normal(size=b).astype(np.float32), root_legal=legal,
                root_searchable=legal & (rng.random((b, k)) < 0.8),
                root_costs=rng.uniform(0, 30, (b, k)).astype(np.float32),
                root_terminal=terminal)


def _tree(seed=0, visits=None, value_sum=None):
    tree = _init(N, **_root_inputs(seed))
    if visits is not None:
        tree = tree.replace(children_visits=jnp.asarray(visits, jnp.int32),
                            children_value_sum=jnp.asarray(value_sum, jnp.float32))
    return tree


# ------------------------------------------------------------------------- init_tree
@given(seed=st.integers(0, 2**31 - 1))
def test_init_tree_writes_the_roots_and_leaves_the_rest_empty(seed):
    args = _root_inputs(seed)
    tree = _init(N, **args)
    t = jax.device_get(tree)
    root, rest = (slice(None), ROOT_INDEX), (slice(None), slice(1, None))
    np.testing.assert_array_equal(t.raw_value[root],
                                  np.where(args["root_terminal"], 0.0, args["root_value"]))
    np.testing.assert_array_equal(t.terminal[root], args["root_terminal"])
    np.testing.assert_array_equal(t.prior_logp[root], args["root_prior_logp"])  # -inf kept
    np.testing.assert_array_equal(t.legal[root], args["root_legal"])
    np.testing.assert_array_equal(t.searchable[root], args["root_searchable"])
    np.testing.assert_array_equal(t.costs[root], args["root_costs"])
    # Past the root: nothing written yet.
    assert np.all(t.raw_value[rest] == 0) and not t.terminal[rest].any()
    assert np.all(t.prior_logp[rest] == -np.inf)
    assert not t.legal[rest].any() and not t.searchable[rest].any() and np.all(t.costs[rest] == 0)
    # No statistics, no links anywhere (the root included: it has no parent).
    for f in ("node_visits", "node_value_sum", "depth", "children_visits",
              "children_value_sum", "children_rewards"):
        assert np.all(getattr(t, f) == 0), f
    assert np.all(t.parents == NO_PARENT) and np.all(t.action_from_parent == NO_PARENT)
    assert np.all(t.children_index == UNVISITED)
    # States: every leaf [B, N, ...], the root's at node 0, zeros elsewhere.
    for got, want in zip(jax.tree.leaves(t.states), jax.tree.leaves(args["root_states"])):
        want = np.asarray(want)
        assert got.shape == (B, N) + want.shape[1:] and got.dtype == want.dtype
        np.testing.assert_array_equal(got[:, ROOT_INDEX], want)
        assert np.all(got[:, 1:] == 0)
    # A fresh tree has no Q value.
    assert np.all(np.asarray(_qvalues(tree, jnp.zeros(B, jnp.int32))) == 0)


@pytest.mark.parametrize("b,n,k", [(1, 1, 2), (2, 7, 3)])
def test_init_tree_shapes_dtypes_and_sizes(b, n, k):
    """Inputs of other dtypes (int legal / terminal, float64 costs) are cast to the
    docstring's; Tree's sizes read B, N, K."""
    states = {"a": np.arange(b, dtype=np.int32), "b": np.ones((b, 2, 3), np.float32)}
    t = init_tree(n, states, np.zeros((b, k)), np.ones(b), np.ones((b, k), np.int32),
                  np.ones((b, k), np.int32), np.ones((b, k), np.float64), np.zeros(b, np.int32))
    for f, (dims, dtype) in FIELDS.items():
        shape = (b, n) if dims == "N" else (b, n, k)
        assert getattr(t, f).shape == shape and getattr(t, f).dtype == dtype, f
    assert t.states["a"].shape == (b, n) and t.states["b"].shape == (b, n, 2, 3)
    assert (t.batch_size, t.num_nodes, t.num_actions) == (b, n, k)
    assert np.all(np.asarray(t.raw_value[:, 0]) == 1.0)  # not terminal: the value as given


@pytest.mark.parametrize("bad", [
    dict(root_legal=np.ones((B, K + 1), bool)),
    dict(root_costs=np.ones((B + 1, K), np.float32)),
    dict(root_value=np.zeros(B + 1, np.float32)),
    dict(root_terminal=np.zeros((B, 1), bool)),
    dict(root_prior_logp=np.zeros(K, np.float32)),
])
def test_init_tree_rejects_inconsistent_root_shapes(bad):
    args = {**_root_inputs(0), **bad}
    with pytest.raises(AssertionError):
        init_tree(N, **args)


# --------------------------------------------------------------------------- qvalues
def test_qvalues_hand_case():
    """Tree 0 asks its root: 2 simulations through a0 (returns 3 + 4), none through a1,
    one through a2 (0.5) -> [3.5, 0, 0.5]. Tree 1 asks node 1: a1 four times (sum -2),
    a2 once (0.25) -> [0, -0.5, 0.25]. The other nodes hold statistics that must not be
    read."""
    visits = np.zeros((B, N, K), np.int32)
    sums = np.zeros((B, N, K), np.float32)
    visits[0, 0, :3], sums[0, 0, :3] = [2, 0, 1], [7.0, 0.0, 0.5]
    visits[0, 1], sums[0, 1] = 1, 9.0
    visits[1, 1, :3], sums[1, 1, :3] = [0, 4, 1], [0.0, -2.0, 0.25]
    visits[1, 0], sums[1, 0] = 5, 1.0
    visits[2, 4, 3], sums[2, 4, 3] = 3, 1.5
    q = np.asarray(_qvalues(_tree(0, visits, sums), jnp.array([0, 1, 4], jnp.int32)))
    np.testing.assert_allclose(q, [[3.5, 0.0, 0.5, 0.0], [0.0, -0.5, 0.25, 0.0],
                                   [0.0, 0.0, 0.0, 0.5]], rtol=1e-7)


@given(visits=hnp.arrays(np.int32, (B, N, K), elements=st.integers(0, 6)),
       sums=hnp.arrays(np.float32, (B, N, K), elements=st.floats(-50, 50, width=32)),
       index=hnp.arrays(np.int32, (B,), elements=st.integers(0, N - 1)))
def test_qvalues_matches_numpy(visits, sums, index):
    q = np.asarray(_qvalues(_tree(0, visits, sums), jnp.asarray(index)))
    ref = np.where(visits > 0, sums / np.maximum(visits, 1).astype(np.float32), 0.0)
    assert q.shape == (B, K) and q.dtype == np.float32
    # atol: XLA:CPU flushes subnormal quotients to zero.
    np.testing.assert_allclose(q, ref[np.arange(B), index], rtol=1e-6, atol=1e-37)


# ------------------------------------------------------------------ a searched tree
def test_searched_tree_layout_and_value_sums():
    params = TOY.make_params(seed=0)
    sims = 16
    t = jax.device_get(toy_search("uct", sims)(params, toy_roots(params, 2),
                                               jax.random.PRNGKey(0)).tree)
    assert isinstance(t, Tree) and t.num_nodes == sims + 1
    b, n, a = np.nonzero(t.children_index != UNVISITED)
    c = t.children_index[b, n, a]
    assert len(c) > 0
    # Simulation s writes its node at s + 1: after its parent, each slot at most once.
    assert np.all((c > n) & (c <= sims))
    assert len(set(zip(b.tolist(), c.tolist()))) == len(c)
    # Every node with a parent is that parent's child by its action; the rest are empty.
    bb, nn = np.nonzero(t.parents != NO_PARENT)
    np.testing.assert_array_equal(
        t.children_index[bb, t.parents[bb, nn], t.action_from_parent[bb, nn]], nn)
    orphan = t.parents == NO_PARENT
    orphan[:, ROOT_INDEX] = False
    assert np.all(t.node_visits[orphan] == 0) and np.all(t.node_value_sum[orphan] == 0)
    assert np.all(t.action_from_parent[orphan] == NO_PARENT)
    # children_value_sum[n, k] = sum over the simulations through (n, k) of r(n, k) + the
    # return from the child = visits * r(n, k) + node_value_sum[child].
    np.testing.assert_allclose(
        t.children_value_sum[b, n, a],
        t.children_visits[b, n, a] * t.children_rewards[b, n, a] + t.node_value_sum[b, c],
        rtol=1e-5, atol=1e-5)
    # The root's simulations all leave it by an edge.
    assert np.all(t.node_visits[:, ROOT_INDEX] == sims)
    np.testing.assert_allclose(t.node_value_sum[:, ROOT_INDEX],
                               t.children_value_sum[:, ROOT_INDEX].sum(-1), rtol=1e-5, atol=1e-5)
    # qvalues of the root is the per-edge mean of these sums.
    q = np.asarray(jax.jit(Tree.qvalues)(jax.tree.map(jnp.asarray, t),
                                         jnp.zeros(2, jnp.int32)))
    v = t.children_visits[:, ROOT_INDEX]
    np.testing.assert_allclose(q * v, t.children_value_sum[:, ROOT_INDEX], rtol=1e-5, atol=1e-5)
