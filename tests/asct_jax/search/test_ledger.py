"""search.ledger: the paper's Table 3 ledger of one iteration, worked by hand on
TinyWorkflow (tests/helpers/tiny_workflow.py), and J_search (Eq. 5) on a hand case."""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax import search as S
from asct_jax.search import ledger
from tests.helpers.tiny_workflow import K, P, TINY_CHAT, WF, make_params, roots, wf_search


def test_j_search_hand_case():
    """Two live states, 12 trials each, mean utilities 0.5 and 0.2, and a dead one:
    K = 24, sum U = 6 + 2.4, T_aux = 1000: J = (8.4 - 1e-4 x 1000) / 24."""
    out = types.SimpleNamespace(visits=jnp.array([[6, 6], [12, 0], [5, 5]]),
                                search_value=jnp.array([0.5, 0.2, 0.9]))
    j, u = ledger.j_search(out, jnp.array([True, True, False]), jnp.float32(1000.0))
    assert float(j) == pytest.approx((8.4 - 0.1) / 24)
    assert float(u) == pytest.approx(8.4 / 24)


def _episode(params, qid):
    """One episode's stored states [1, 3]: the root (node 0, turn 0), node 1 (turn 1),
    padding (a copy of node 1); real turns [T, T, F]."""
    r = jax.tree.map(lambda x: x[0], roots([qid]))
    cands, _ = WF.legal_actions(r, params)
    s1, _ = WF.step(r, cands[0], params)
    states = jax.tree.map(lambda a, b: jnp.stack([a, b, b])[None], r, s1)
    return types.SimpleNamespace(states=states, turn_mask=jnp.array([[True, True, False]]))


def test_ledger_hand_counted():
    """The chain 0 -> 1 -> 3 searched with pi_old continuations from the roots of questions
    [0, 1, 1] (test_search_accounting's hand count: env component 11 + 11, question 0 + 2;
    one continuation decision per question at node 1, 6 words / 14 chat tokens), then
    question 1's episode (decisions at node 0 and node 1, each 6 words / 14 chat tokens):
    its node-1 decision was scored by a continuation first, so the main trajectory pays
    the root's alone; one optimizer pass reads both."""
    ch = np.full((P, K), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    chain = make_params(children=ch)
    out = wf_search("agentuct", actor=True, unit="chat")(
        chain, roots([0, 1, 1]), jax.random.PRNGKey(0), S.init_cache(WF, chain))
    ctx = types.SimpleNamespace(env=WF, env_params=chain)
    batch = _episode(chain, 1)
    live = jnp.array([True, True, True])
    cache, m = jax.device_get(ledger.ledger_metrics(ctx, TINY_CHAT, out, live, batch,
                                                    out.cache))
    expect = {"ledger/env/component": 22, "ledger/env/question": 2,
              "ledger/continuations/words": 12, "ledger/continuations/chat": 28,
              "ledger/continuations/chat_per_label": 28, "ledger/continuation_decisions": 2,
              "ledger/main_trajectory/words": 6, "ledger/main_trajectory/chat": 14,
              "ledger/main_decisions": 1, "ledger/optimizer_pass/words": 12,
              "ledger/optimizer_pass/chat": 28, "ledger/decisions": 2}
    for k, v in expect.items():
        assert m[k] == pytest.approx(v), k
    assert np.asarray(cache.scored)[1, [0, 1]].all()
    # Without a cache every real turn is charged; without chat tables only words logged.
    _, m = jax.device_get(ledger.ledger_metrics(ctx, None, out, live, batch, None))
    assert m["ledger/main_trajectory/words"] == 12 and m["ledger/main_decisions"] == 2
    assert "ledger/main_trajectory/chat" not in m
