"""Tests of the execution cache and AgentUCT's T_hat (asct_jax.search.cache) on
TinyWorkflow (tests/helpers/tiny_workflow.py) and ToyTree."""
import jax
import jax.numpy as jnp
import numpy as np

from asct_jax import search as S
from asct_jax.search import cache as C
from tests.helpers.tiny_workflow import P, K, TOY, WF, make_params, roots, toy_roots, uniform_policy


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


def test_init_cache_and_lookup():
    """One row per question over every prefix, none executed; lookup reads [qid, prefix]
    and False out of range."""
    cache = S.init_cache(WF, make_params())
    assert cache.executed.shape == cache.scored.shape == (2, P) and not cache.executed.any()
    cache = cache.replace(executed=cache.executed.at[1, 3].set(True))
    got = C.lookup(cache, jnp.array([1, 0, 1, 1]), jnp.array([3, 3, -1, P]))
    np.testing.assert_array_equal(np.asarray(got), [True, False, False, False])


def test_new_iteration_empties_scored_and_keeps_executed():
    """At every training step the actor's scoring namespace starts empty; the executed
    workflows stay for the run (the paper's cache is per method, seed and worker)."""
    cache = S.init_cache(WF, make_params())
    cache = cache.replace(executed=cache.executed.at[1, 3].set(True),
                          scored=cache.scored.at[0, 1].set(True))
    fresh = S.new_iteration(cache)
    np.testing.assert_array_equal(np.asarray(fresh.executed), np.asarray(cache.executed))
    assert not np.asarray(fresh.scored).any()
    assert S.new_iteration(None) is None


def test_scored_prefix_is_charged_again_next_step_executed_prefix_is_not():
    """Chain 0 -> 1 -> 3 (TinyWorkflow), trees of questions (0, 1, 1), pi_old suffixes.
    Step k pays the edges 0-1 [10] and 1-3 [1] plus q per edge: 11 (q 0), 13 (q 1), 0
    (tree 2 shares question 1), and the actor's scoring at prefix 1, 4 observation tokens
    + 1 legal candidate of 2 tokens = 6, once per question: (6, 6, 0). Step k + 1, the
    same search: the executed prefixes are free (0, 0, 0), the scoring is charged again
    (6, 6, 0) after new_iteration; only a cache carried as it is would make it free."""
    from tests.helpers.tiny_workflow import wf_search

    ch = np.full((P, K), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    chain = make_params(children=ch)
    fn = wf_search("agentuct", actor=True)
    r = roots([0, 1, 1])
    step_k = jax.device_get(fn(chain, r, jax.random.PRNGKey(0), S.init_cache(WF, chain)))
    np.testing.assert_allclose(step_k.env_tokens, [11, 13, 0])
    np.testing.assert_allclose(step_k.actor_tokens, [6, 6, 0])
    nxt = jax.device_get(fn(chain, r, jax.random.PRNGKey(0), S.new_iteration(step_k.cache)))
    np.testing.assert_allclose(nxt.env_tokens, [0, 0, 0])
    np.testing.assert_array_equal(nxt.env_calls, [0, 0, 0])
    np.testing.assert_allclose(nxt.actor_tokens, [6, 6, 0])
    kept = jax.device_get(fn(chain, r, jax.random.PRNGKey(0), step_k.cache))
    np.testing.assert_allclose(kept.actor_tokens, [0, 0, 0])
