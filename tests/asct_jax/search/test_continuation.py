"""Tests of the search's continuations (asct_jax.search.continuation) on TinyWorkflow
(tests/helpers/tiny_workflow.py): each rule's draw, the trace the ledger reads, the actor's
scoring tokens."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax import search as S
from asct_jax.search import cache as C
from asct_jax.search.continuation import continue_episode
from tests.helpers.tiny_workflow import P, WF, cost_tree, make_params, roots, uniform_policy


def test_continuations_follow_their_policy():
    """4000 continuations from the root of _cost_tree(1e4) (T_hat(0, .) = [11, 11, 10001]):
    a cost-weighted one takes a first with P(a) ~ exp(-1e-4 T_hat(0, a)), a uniform one
    1/3 each; the trace lists the prefixes executed and their realized tokens (+ q = 1)."""
    params = cost_tree(1e4, [0.1, 0.2, 0.3])
    model = S.EnvModel(WF, params, uniform_policy(WF, params))
    state = jax.tree.map(lambda x: x[0], roots([1]))
    table = jax.jit(C.t_hat_table, static_argnums=2)(WF.workflow(params), jnp.zeros(P, bool), 4)
    np.testing.assert_allclose(np.asarray(table[0]), [11, 11, 10001])
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    w = np.exp(-1e-4 * np.array([11.0, 11.0, 10001.0]))
    cost_weighted = functools.partial(S.cost_weighted_continuation, c_tok=1e-4)
    for cont, prob in ((cost_weighted, w / w.sum()), (S.uniform_continuation, np.full(3, 1 / 3))):
        g, cost, trace = jax.device_get(jax.jit(jax.vmap(
            lambda k: continue_episode(model, cont, state, k, table)))(keys))
        a = trace.prefix[:, 0] - 1
        np.testing.assert_allclose(np.bincount(a, minlength=3) / 4000, prob, atol=0.03)
        assert np.all(trace.valid[:, :2]) and not np.any(trace.valid[:, 2])
        np.testing.assert_array_equal(trace.prefix[:, 1], a + 4)
        np.testing.assert_allclose(trace.tokens[:, 0], np.array([11.0, 11.0, 1e4 + 1])[a])
        np.testing.assert_allclose(trace.tokens[:, 1], 2.0)
        np.testing.assert_allclose(g, np.array([0.1, 0.2, 0.3])[a], rtol=1e-6)
        np.testing.assert_allclose(cost.env_tokens, trace.tokens.sum(1))
        assert np.all(cost.env_calls == 2) and np.all(cost.actor_tokens == 0)
        assert np.all(cost.actor_decisions == 0)
        np.testing.assert_allclose(cost.env_parts.sum(-1), cost.env_tokens)   # by category


def test_actor_continuation_scores_its_decisions():
    """pi_old continuations from the root of the chain 0 -> 1 -> 3: two decisions, each
    charged its non-PAD observation tokens (4) plus its legal candidates' (2 per
    candidate), and the deciding workflow nodes 0 and 1 recorded for the ledger."""
    ch = np.full((P, 3), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    params = make_params(children=ch)
    model = S.EnvModel(WF, params, uniform_policy(WF, params))
    state = jax.tree.map(lambda x: x[0], roots([0]))
    g, cost, trace = jax.device_get(jax.jit(
        lambda k: continue_episode(model, S.actor_continuation, state, k, None))(jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(trace.decided, [0, 1, -1])
    # words only: no chat tables
    np.testing.assert_allclose(trace.actor, [[6, 0, 0], [6, 0, 0], [0, 0, 0]])
    np.testing.assert_allclose(cost.actor_tokens, [12, 0, 0])
    assert int(cost.env_calls) == 2 and int(cost.actor_decisions) == 2
