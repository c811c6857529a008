"""asct_jax.envs.ragspace.workflows: `workflow_tree` against a plain-Python enumeration of
the staged workflow written from the package docstring (every prefix a node, reached by
its slot sequence, with its stage / choices / rounds; the terminals the complete
workflows; breadth-first numbering; depth; the nominal auxiliary tokens of every edge,
by hand) and `workflow_actions` (the slot sequences of the terminals, -1 after the end).
K = 2 (the rows padded to the query stage's 3 slots), 5 (default), 6 (probe)."""
import numpy as np
import pytest

from asct_jax.envs.ragspace.spec import DONE, STAGES
from asct_jax.envs.ragspace.workflows import workflow_actions, workflow_tree

Q_TOK = 27                      # CAL["Q_TOK_NOMINAL"]: the nominal question's tokens
N_SLOTS = {"query": 3, "selection": 2, "width": 2, "rerank": 2, "context": 2}
NEXT = {"query": "retriever", "retriever": "selection", "selection": "width",
        "width": "control", "rerank": "context", "context": "done"}
SLOT = {"query": 0, "retriever": 1, "selection": 2, "width": 3, "rerank": 4, "context": 5}


def reference_prefixes(num_retrievers):
    """{slot sequence: (stage name, rounds, choice)} of every prefix (docstring model)."""
    out = {}

    def go(slots, stage, rounds, choice):
        out[tuple(slots)] = (stage, rounds, choice)
        if stage == "done":
            return
        if stage == "control":                  # stop -> rerank; continue (< 3 rounds)
            go(slots + [0], "rerank", rounds, choice)
            if rounds < 3:
                go(slots + [1], "control", rounds + 1, choice)
            return
        n = num_retrievers if stage == "retriever" else N_SLOTS[stage]
        for k in range(n):
            c = list(choice)
            c[SLOT[stage]] = k
            go(slots + [k], NEXT[stage], 1 if stage == "width" else rounds, tuple(c))

    go([], "query", 0, (-1,) * 6)
    return out


def reference_tokens(stage, rounds, choice, k):
    """Auxiliary tokens of slot k (no evidence found, nominal question): the docstring's
    generator input + output, query embeddings of the dense rankings, reranker input."""
    qry, ret, _, wid = choice[:4]
    n_pass = rounds * (2 if qry == 2 else 1) * (3 if wid == 0 else 6)
    if stage == "query":
        return [0, Q_TOK + 30 + 130, Q_TOK + 30 + 2 * 16][k]
    if stage == "width" or (stage == "control" and k == 1):      # a retrieval round
        dense = 0 if ret == 0 else 3 if ret == 4 else 1              # bm25 / rrf / other
        return dense * [Q_TOK, Q_TOK + 130, 2 * 16][qry]
    if stage == "rerank" and k == 1:
        return 20 * n_pass
    if stage == "context":
        return Q_TOK + 30 + 30 * min([2, 4][k], n_pass) + 8
    return 0


def stage_id(name):
    return DONE if name == "done" else STAGES.index(name)


@pytest.fixture(scope="module", params=[2, 5, 6])
def case(request):
    k = request.param
    tree, attrs = workflow_tree(k)
    return k, tree, attrs, reference_prefixes(k)


def walk(children, slots):
    node = 0
    for k in slots:
        node = int(children[node, k])
        assert node >= 0, slots
    return node


def test_counts_and_shapes(case):
    k, tree, attrs, ref = case
    n = len(ref)
    n_complete = sum(stage == "done" for stage, _, _ in ref.values())
    assert n_complete == 3 * k * 2 * 2 * 3 * 2 * 2          # 3 control paths: 1, 2, 3 rounds
    assert tree.children.shape == (n, max(k, 3)) and tree.children.dtype == np.int32
    assert tree.terminal.shape == tree.depth.shape == (n,) and tree.terminal.sum() == n_complete
    assert tree.edge_tokens.shape == tree.children.shape
    assert attrs["choice"].shape == (n, 6) and attrs["stage"].shape == attrs["rounds"].shape
    if k == 5:
        assert (n, n_complete) == (1489, 720)               # the package docstring's


def test_every_prefix_is_one_node_with_its_stage_choices_and_rounds(case):
    k, tree, attrs, ref = case
    nodes = {}
    for slots, (stage, rounds, choice) in ref.items():
        node = walk(tree.children, slots)
        nodes[slots] = node
        assert attrs["stage"][node] == stage_id(stage), slots
        assert attrs["rounds"][node] == rounds, slots
        assert tuple(attrs["choice"][node]) == choice, slots
        assert tree.depth[node] == len(slots)
        assert bool(tree.terminal[node]) == (stage == "done")
    assert sorted(nodes.values()) == list(range(len(ref)))  # a bijection: no shared node


def test_children_are_the_legal_slots_only(case):
    k, tree, attrs, ref = case
    for slots, (stage, _, _) in ref.items():
        row = tree.children[walk(tree.children, slots)]
        legal = [s for s in range(row.shape[0]) if slots + (s,) in ref]
        assert np.flatnonzero(row >= 0).tolist() == legal, slots
        assert np.all(row[len(legal):] == -1)


def test_nodes_are_numbered_breadth_first(case):
    _, tree, _, _ = case
    c = tree.children
    assert np.array_equal(c[c >= 0], np.arange(1, c.shape[0]))   # row-major = BFS order
    assert np.all(np.diff(tree.depth) >= 0) and tree.depth[0] == 0
    parents, slots = np.nonzero(c >= 0)
    assert np.all(tree.depth[c[parents, slots]] == tree.depth[parents] + 1)
    assert tree.depth.max() == 9 and tree.depth[tree.terminal].min() == 7


def test_edge_tokens_are_the_nominal_aux_tokens_by_hand(case):
    _, tree, _, ref = case
    for slots, (stage, rounds, choice) in ref.items():
        node = walk(tree.children, slots)
        for s, child in enumerate(tree.children[node]):
            want = reference_tokens(stage, rounds, choice, s) if child >= 0 else 0.0
            assert tree.edge_tokens[node, s] == pytest.approx(want), (slots, s)
    assert tree.edge_tokens.dtype == np.float32


def test_workflow_actions_are_the_complete_slot_sequences(case):
    k, tree, _, ref = case
    actions = workflow_actions(k)
    assert actions.dtype == np.int32 and actions.shape == (int(tree.terminal.sum()), 9)
    rows = []
    for row in actions:
        n = int(np.sum(row >= 0))
        assert np.all(row[:n] >= 0) and np.all(row[n:] == -1), row   # -1 only at the end
        rows.append(tuple(row[:n].tolist()))
    complete = {s for s, (stage, _, _) in ref.items() if stage == "done"}
    assert len(set(rows)) == len(rows) and set(rows) == complete
    # in the terminals' node order
    assert [walk(tree.children, r) for r in rows] == np.flatnonzero(tree.terminal).tolist()


def test_tree_is_cached_per_retriever_count():
    assert workflow_tree(5) is workflow_tree(5)
    assert workflow_tree(5)[0].children.shape[1] != workflow_tree(6)[0].children.shape[1]
