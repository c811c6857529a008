"""Tests of the search's accounting (asct_jax.search.accounting): traversal charging
without a cache, the ledger with one (each prefix charged once, in tree order; actor
scoring once per prefix), by cost category and actor-token unit (a hand-counted
workflow), on ToyTree and TinyWorkflow (tests/helpers/tiny_workflow.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax import search as S
from asct_jax.search import accounting
from asct_jax.search.methods import paper_rules
from tests.helpers.tiny_workflow import (K, P, Q, TOY, WF, make_params, prefix_costs, roots, toy_roots,
                           toy_search, uniform_policy, wf_search)


def test_traversal_cost_charges():
    """Without a cache a trial pays its path's edges plus its leaf evaluation's steps;
    nothing for an inactive tree's leaf evaluation."""
    params = TOY.make_params(seed=0)
    t = jax.tree.map(jnp.asarray, toy_search("uct", 16)(params, toy_roots(params, 2),
                                                        jax.random.PRNGKey(0)).tree)
    path = S.BackupPath(nodes=jnp.array([[2, 0, 0], [0, 0, 0]], jnp.int32),
                        actions=jnp.array([[1, 3, 0], [2, 0, 0]], jnp.int32),
                        valid=jnp.array([[True, True, False], [True, False, False]]))
    active = jnp.array([True, False])
    leaf_cost = S.Cost(jnp.array([100.0, 100.0]), jnp.array([5, 5], jnp.int32),
                       jnp.array([[7.0, 8.0, 9.0]] * 2), jnp.array([[100.0], [100.0]]),
                       jnp.array([1, 1], jnp.int32))
    costs = np.asarray(params.costs)
    model = S.EnvModel(TOY, params, None)
    trav = accounting.traversal_cost(model, t, path, active, leaf_cost)
    np.testing.assert_array_equal(trav.env_tokens, [costs[1] + costs[3] + 100.0, costs[2]])
    np.testing.assert_array_equal(trav.env_parts[:, 0], trav.env_tokens)   # one category
    np.testing.assert_array_equal(trav.env_calls, [2 + 5, 1])
    np.testing.assert_array_equal(trav.actor_tokens, [[7.0, 8.0, 9.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(trav.actor_decisions, [1, 0])
    cache, same = accounting.trial_cost(None, model, t, path, leaf_cost, None, None, active)
    assert cache is None and np.array_equal(same.env_tokens, trav.env_tokens)


def test_first_claims_and_charge():
    """The lowest index claims a (question, prefix) first; a cached or invalid entry is
    never charged; every valid entry is marked."""
    qid = jnp.array([0, 1, 0, 0, 1], jnp.int32)
    prefix = jnp.array([3, 3, 3, 5, 3], jnp.int32)
    valid = jnp.array([True, True, True, True, False])
    np.testing.assert_array_equal(np.asarray(accounting.first_claims(qid, prefix, valid)),
                                  [True, True, False, True, False])
    cache = S.init_cache(WF, make_params())
    cache = cache.replace(executed=cache.executed.at[0, 5].set(True))
    new, charged = accounting.charge(cache, jnp.array([0, 1]), jnp.array([[3, 5], [3, 3]]),
                                     jnp.array([[True, True], [True, True]]))
    np.testing.assert_array_equal(np.asarray(charged), [[True, False], [True, False]])
    assert np.asarray(new.executed)[[0, 0, 1], [3, 5, 3]].all() and not new.scored.any()


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
        np.testing.assert_allclose(out.env_tokens[0], cost1[new].sum(), rtol=1e-6)
        assert out.env_calls[0] == new.sum() and np.all(out.visits.sum(1) == 12)
        assert np.all(out.aux_tokens == out.env_tokens) and np.all(out.actor_tokens == 0)
        cache, outs = out.cache, outs + [out]
        if np.asarray(cache.executed)[1, 1:].all():
            break
    assert np.asarray(cache.executed)[1, 1:].all() and not np.asarray(cache.executed)[1, 0]
    assert outs[0].env_tokens[0] > 0
    # Fully cached paths cost nothing; the trials still run.
    out = jax.device_get(fn(params, r, jax.random.PRNGKey(99), cache))
    assert out.env_tokens[0] == 0 and out.env_calls[0] == 0 and np.all(out.visits.sum(1) == 12)
    # Without a cache the first search's trials pay every executed edge (traversal).
    out0 = jax.device_get(fn(params, r, jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(out0.visits, outs[0].visits)
    assert out0.cache is None and np.all(out0.env_tokens > outs[0].env_tokens)
    assert np.all(out0.env_calls > outs[0].env_calls)
    # A partial hit: prefix 2 cached beforehand, the first search pays all but it.
    part = cache0.replace(executed=cache0.executed.at[1, 2].set(True))
    out3 = jax.device_get(fn(params, r, jax.random.PRNGKey(0), part))
    np.testing.assert_allclose(out3.env_tokens[0], outs[0].env_tokens[0] - cost1[2], rtol=1e-6)


def test_parallel_trees_of_one_question_charge_a_shared_prefix_once():
    """B = 3 trees in one call: two of question 0, one of question 1. Per question, the
    trees' t_env sums to the realized cost of its executed prefixes, each counted once
    (the lowest tree index pays a prefix both execute in the same step)."""
    params = make_params()
    fn = wf_search("uniform")
    out = jax.device_get(fn(params, roots([0, 0, 1]), jax.random.PRNGKey(3), S.init_cache(WF, params)))
    ex = np.asarray(out.cache.executed)
    for q, trees in ((0, [0, 1]), (1, [2])):
        np.testing.assert_allclose(out.env_tokens[trees].sum(), prefix_costs(params, q)[ex[q]].sum(), rtol=1e-6)
        assert out.env_calls[trees].sum() == ex[q].sum()
    alone = jax.device_get(fn(params, roots([0, 1, 1]), jax.random.PRNGKey(3),
                              S.init_cache(WF, params))).env_tokens[0]
    assert out.env_tokens[:2].sum() < 2 * alone  # the two q0 trees share their prefixes
    traces = fn.traces
    # A chain 0 -> 1 -> 3: in the first step both trees execute the same two prefixes; the
    # lower index pays them, the other tree nothing; later trials are cached.
    ch = np.full((P, K), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    chain = make_params(children=ch)
    out = jax.device_get(fn(chain, roots([0, 0, 1]), jax.random.PRNGKey(4), S.init_cache(WF, chain)))
    np.testing.assert_allclose(out.env_tokens, [10 + 1, 0, 10 + 1 + 1 + 1])  # realized: + q per edge
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
    np.testing.assert_allclose(out.actor_tokens, [6, 6, 0])
    np.testing.assert_allclose(out.env_tokens, [11, 13, 0])  # realized: edge tokens + q per edge
    np.testing.assert_allclose(out.aux_tokens, out.env_tokens + out.actor_tokens)
    assert fn.policy.calls > 1
    rule_fn = wf_search("agentuct")
    out = jax.device_get(rule_fn(chain, roots([0, 1, 1]), jax.random.PRNGKey(0)))
    assert rule_fn.policy.calls == 1 and np.all(out.actor_tokens == 0)
    assert np.all(np.isfinite(out.prior_logp[:, 0])) and np.all(out.prior_logp[:, 1:] == -np.inf)


@pytest.mark.slow
def test_ledger_by_category_and_unit_hand_counted():
    """The chain 0 -> 1 -> 3 searched from the roots of questions [0, 1, 1] with pi_old
    continuations, worked by hand (tests/helpers/tiny_workflow.py's costs and TINY_CHAT):
    tree 0 (q 0) executes 0 -> 1 (10 + 0) and 1 -> 3 (1 + 0): component 11, question 0;
    tree 1 (q 1) the same edges at + 1 each: component 11, question 2; tree 2 (q 1)
    finds both cached: nothing. One actor decision, at node 1 (turn 1), per question:
    words 4 observation + 2 label = 6; chat 7 template + 5 observation + 2 label = 14,
    per label the same (one legal label); tree 2's is charged to tree 1 (scored once)."""
    ch = np.full((P, K), -1)
    ch[0, 0], ch[1, 0] = 1, 3
    chain = make_params(children=ch)
    outs = {}
    for unit in ("words", "chat"):
        fn = wf_search("agentuct", actor=True, unit=unit)
        outs[unit] = out = jax.device_get(fn(chain, roots([0, 1, 1]), jax.random.PRNGKey(0),
                                             S.init_cache(WF, chain)))
        np.testing.assert_allclose(out.env_parts, [[11, 0], [11, 2], [0, 0]])
        np.testing.assert_allclose(out.env_parts.sum(1), out.env_tokens)
        np.testing.assert_allclose(out.actor_units, [[6, 14, 14], [6, 14, 14], [0, 0, 0]])
        np.testing.assert_array_equal(out.actor_decisions, [1, 1, 0])
        np.testing.assert_allclose(out.aux_tokens, out.env_tokens + out.actor_tokens)
    # The option's values: t_actor (and T_aux) in words or in chat tokens, the rest equal.
    np.testing.assert_allclose(outs["words"].actor_tokens, [6, 6, 0])
    np.testing.assert_allclose(outs["chat"].actor_tokens, [14, 14, 0])
    np.testing.assert_array_equal(outs["words"].visits, outs["chat"].visits)
    # Without a cache every continuation decision is charged (traversal), by category too.
    out = jax.device_get(wf_search("agentuct", actor=True, unit="chat")(
        chain, roots([0, 1, 1]), jax.random.PRNGKey(0)))
    np.testing.assert_allclose(out.env_parts.sum(1), out.env_tokens)
    np.testing.assert_allclose(out.actor_units[:, 1], 14 * out.actor_decisions)
    assert np.all(out.actor_decisions >= 1)


def test_chat_units_need_the_chat_tables():
    """actor_unit "chat" without chat tables is refused; a bad unit is refused."""
    params = make_params()
    cfg = S.SearchConfig(num_simulations=2, actor_unit="chat")
    with pytest.raises(ValueError, match="chat tables"):
        S.search(WF, params, roots([0]), uniform_policy(WF, params), jax.random.PRNGKey(0),
                 paper_rules("uniform"), cfg)
    with pytest.raises(ValueError, match="actor_unit"):
        S.SearchConfig(actor_unit="bytes")
