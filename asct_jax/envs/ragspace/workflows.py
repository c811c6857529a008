"""The staged workflow of `ragspace` enumerated as a prefix tree (NumPy, cached): 1489
prefixes, 720 complete workflows."""
from __future__ import annotations

import functools
from typing import Dict, Tuple

import numpy as np

from asct_jax.envs.base import WorkflowTree
from asct_jax.envs.ragspace.simulator import edge_cost
from asct_jax.envs.ragspace.spec import (CAL, CHOICE_STAGES, CONTEXT, CONTROL, DONE, QUERY,
                                         RERANK, WIDTH, num_legal)


@functools.lru_cache(maxsize=4)
def workflow_tree(num_retrievers: int = 5) -> Tuple[WorkflowTree, Dict[str, np.ndarray]]:
    """(WorkflowTree, node attributes) of the staged workflow, in NumPy (cached).

    Nodes in breadth-first order (root 0). Node attributes: stage [P], choice [P, 6],
    rounds [P]. edge_tokens are the auxiliary tokens at the nominal question length with
    no evidence found (the realized ones are `action_costs`).
    """
    K = max(num_retrievers, 3)
    nodes = [(QUERY, 0, (-1,) * 6)]
    children = []
    i = 0
    while i < len(nodes):
        stage, rounds, ch = nodes[i]
        row = [-1] * K
        for k in range(K):
            if stage == DONE or k >= num_legal(stage, rounds, num_retrievers):
                continue
            if stage == CONTROL:
                nxt = (RERANK, rounds, ch) if k == 0 else (CONTROL, rounds + 1, ch)
            else:
                c = list(ch)
                c[CHOICE_STAGES.index(stage)] = k
                nxt = (CONTROL if stage == WIDTH else stage + 1 if stage < CONTEXT else DONE,
                       1 if stage == WIDTH else rounds, tuple(c))
            row[k] = len(nodes)
            nodes.append(nxt)
        children.append(row)
        i += 1
    children = np.asarray(children, np.int32)
    stage = np.asarray([n[0] for n in nodes], np.int32)
    rounds = np.asarray([n[1] for n in nodes], np.int32)
    choice = np.asarray([n[2] for n in nodes], np.int32)
    depth = np.zeros(len(nodes), np.int32)
    for p in range(len(nodes)):
        for c in children[p]:
            if c >= 0:
                depth[c] = depth[p] + 1
    kk = np.arange(K)[None, :]
    _, tok = edge_cost(stage[:, None], kk, *(choice[:, j, None] for j in range(4)),
                       rounds[:, None], 0, float(CAL["Q_WORDS_NOMINAL"]),
                       float(CAL["Q_TOK_NOMINAL"]))
    tok = np.where(children >= 0, np.asarray(tok), 0.0).astype(np.float32)
    tree = WorkflowTree(children=children, terminal=stage == DONE, edge_tokens=tok,
                        depth=depth)
    return tree, dict(stage=stage, choice=choice, rounds=rounds)


def workflow_actions(num_retrievers: int = 5) -> np.ndarray:
    """[W, 9] int32 slot sequences of every complete workflow (-1 after its end)."""
    tree, _ = workflow_tree(num_retrievers)
    paths = {0: []}
    for p in range(tree.children.shape[0]):          # BFS order: parents before children
        for k, c in enumerate(tree.children[p]):
            if c >= 0:
                paths[int(c)] = paths[p] + [k]
    out = [paths[n] + [-1] * (9 - len(paths[n])) for n in np.flatnonzero(tree.terminal)]
    return np.asarray(out, np.int32)
