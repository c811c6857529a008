"""How the search charges what it executes (the ASCT paper's token accounting), beside
the execution cache it reads and marks (search.cache).

Counts with one meaning each (search.types): env_tokens t_env, the realized
env.action_costs of executed environment steps, and env_parts, the same by category
(env.action_cost_parts: the paper's Table 3 rows); actor_tokens t_actor, the
actor-scoring tokens of pi_old continuation decisions, in every unit of
search.scoring.ACTOR_UNITS (per decision `actor_scoring_tokens`: the observation's and
the legal labels' word tokens, or their length as the pretrained actor's chat prompt);
actor_decisions, the decisions charged; env_calls, the environment steps charged.
aux_tokens T_aux = env_tokens + actor_tokens.

A trial executes its tree path and its leaf's continuations. `trial_cost` charges it:
  * without a cache (`traversal_cost`): every edge of the trial's path, as a search that
    re-executes the workflow from the root would (the paper's accounting), and every
    continuation step;
  * with an ExecutionCache (`ledger_cost`): only the edges into prefixes not executed
    before; trees of one question searched in the same step charge a shared new prefix
    once (the lowest tree index claims it, `first_claims`), so totals equal a sequential
    execution in tree order. Actor scoring at a prefix is charged once likewise (the
    cache's "scored" table: the paper's VinePPO ledger).
Pure and jit-able; B trees, D the depth cap, E ledger entries per tree.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.search.cache import ExecutionCache, lookup
from asct_jax.search.scoring import ACTOR_UNITS, decision_tokens
from asct_jax.search.tree import Tree
from asct_jax.search.types import BackupPath, Cost, EnvModel, Trace

_NO_KEY = jnp.iinfo(jnp.int32).max


def actor_scoring_tokens(model: EnvModel, state: Any, cands: chex.Array,
                         legal: chex.Array) -> chex.Array:
    """[U] f32: t_actor of ONE actor decision at `state` in every unit of ACTOR_UNITS
    (search.scoring.decision_tokens; cands [K, A], legal [K]; model.chat the chat
    tables)."""
    obs = model.env.observe(state, model.env_params)
    return decision_tokens(obs, cands, legal, model.chat)


def edge_parts(model: EnvModel, tree: Tree, path: BackupPath) -> chex.Array:
    """[B, D, C] f32: the env tokens by category (env.action_cost_parts) of each path
    edge, from its parent's stored state (their sum is tree.costs of the edge)."""
    env, p = model.env, model.env_params

    def one(tree, path):
        pstates = jax.tree.map(lambda x: x[path.nodes], tree.states)        # [D, ...]
        return jax.vmap(lambda s, a: env.action_cost_parts(s, p)[a])(pstates, path.actions)

    return jax.vmap(one)(tree, path)


def add_costs(a: Cost, b: Cost) -> Cost:
    return Cost(*(x + y for x, y in zip(a, b)))


# ----------------------------------------------------------------- without a cache
def _traversal_cost_one(tree: Tree, path: BackupPath, parts, active, leaf_cost: Cost) -> Cost:
    """ONE tree: every edge of the path re-executed, plus the leaf's continuations."""
    tokens = jnp.sum(jnp.where(path.valid, tree.costs[path.nodes, path.actions], 0.0))
    calls = jnp.sum(path.valid.astype(jnp.int32))
    by_part = jnp.sum(jnp.where(path.valid[:, None], parts, 0.0), axis=0)
    return Cost(tokens + jnp.where(active, leaf_cost.env_tokens, 0.0),
                calls + jnp.where(active, leaf_cost.env_calls, 0),
                jnp.where(active, leaf_cost.actor_tokens, 0.0),
                by_part + jnp.where(active, leaf_cost.env_parts, 0.0),
                jnp.where(active, leaf_cost.actor_decisions, 0))


def traversal_cost(model: EnvModel, tree: Tree, path: BackupPath, active: chex.Array,
                   leaf_cost: Cost) -> Cost:
    """Cost [B] of one trial without a cache: its path's edges (tree.costs; by category
    `edge_parts`) plus its leaf evaluation's steps (counted only for an active tree).

    Args: model; tree: the batched Tree; path: BackupPath [B, D]; active: [B] bool;
      leaf_cost: Cost [B].
    """
    return jax.vmap(_traversal_cost_one)(tree, path, edge_parts(model, tree, path), active,
                                         leaf_cost)


# -------------------------------------------------------------------- with a cache
def first_claims(qid: chex.Array, prefix: chex.Array, valid: chex.Array) -> chex.Array:
    """[M] bool: entry i is the first valid entry (lowest index) with its (qid, prefix).

    A segment-min by sorting the keys (qid, prefix, i) lexicographically. qid, prefix,
    valid: [M].
    """
    chex.assert_equal_shape([qid, prefix, valid])
    m = qid.shape[0]
    idx = jnp.arange(m, dtype=jnp.int32)
    q = jnp.where(valid, qid.astype(jnp.int32), _NO_KEY)
    p = jnp.where(valid, prefix.astype(jnp.int32), _NO_KEY)
    qs, ps, order = jax.lax.sort((q, p, idx), num_keys=3)
    head = jnp.concatenate([jnp.ones((1,), bool), (qs[1:] != qs[:-1]) | (ps[1:] != ps[:-1])])
    return jnp.zeros((m,), bool).at[order].set(head) & valid


def charge(cache: ExecutionCache, qid: chex.Array, prefix: chex.Array,
           valid: chex.Array, table: str = "executed") -> Tuple[ExecutionCache, chex.Array]:
    """The ledger of one simulation step of B trees (table "executed": edges executed;
    "scored": actor decisions scored, `prefix` then names the deciding node).

    Args:
      cache: the cache before the step.
      qid: [B] i32, each tree's question.
      prefix: [B, E] i32, the prefix each executed edge reaches, tree-major in execution
        order.
      valid: [B, E] bool, the entry is an executed edge.

    Returns:
      (the cache with every valid entry marked,
       charged [B, E] bool: valid, not cached before the step, and the first entry of the
       step with its (qid, prefix): pay its realized tokens and count an env call.)
    """
    chex.assert_equal_shape([prefix, valid])
    chex.assert_shape(qid, prefix.shape[:1])
    q = jnp.broadcast_to(qid[:, None], prefix.shape).astype(jnp.int32)
    new = valid & ~lookup(cache, q, prefix, table)
    first = first_claims(q.reshape(-1), prefix.reshape(-1), new.reshape(-1)).reshape(prefix.shape)
    row = jnp.where(valid, q, cache.num_questions)  # out of range: dropped
    marked = getattr(cache, table).at[row, prefix].set(True, mode="drop")
    return cache.replace(**{table: marked}), new & first


def path_trace(model: EnvModel, tree: Tree, path: BackupPath) -> Trace:
    """Trace [B, D] of the tree edges of each trial's path: the prefix of each edge's
    child, the edge's realized cost (tree.costs; by category `edge_parts`), path.valid;
    no actor decision (tree edges are chosen by the search's rules)."""

    def one(tree, path):
        child = jnp.clip(tree.children_index[path.nodes, path.actions], 0)
        cstates = jax.tree.map(lambda x: x[child], tree.states)             # [D, ...]
        prefix = jax.vmap(lambda s: model.env.workflow_node(s, model.env_params))(cstates)
        d = path.valid.shape[0]
        return Trace(prefix.astype(jnp.int32), tree.costs[path.nodes, path.actions], path.valid,
                     jnp.full((d,), -1, jnp.int32), jnp.zeros((d, len(ACTOR_UNITS))),
                     jnp.zeros((d, len(model.env.cost_parts))))

    trace = jax.vmap(one)(tree, path)
    return trace._replace(parts=edge_parts(model, tree, path))


def ledger_cost(cache: ExecutionCache, model: EnvModel, tree: Tree, path: BackupPath,
                leaf_trace: Trace, qid: chex.Array,
                active: chex.Array) -> Tuple[ExecutionCache, Cost]:
    """Cost [B] of one trial step with an execution cache: the path's tree edges and the
    continuations' steps, each charged its realized tokens (and one env call) iff its
    prefix is uncached and first claimed in this step (`charge`), then marked; each actor
    decision's scoring likewise, in the cache's "scored" table.

    Args: cache; model; tree: the batched Tree; path: BackupPath [B, D]; leaf_trace:
      Trace [B, E]; qid: [B] i32; active: [B] bool.

    Returns: (the updated cache, Cost [B]).
    """
    trace = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=1),
                         path_trace(model, tree, path), leaf_trace)
    valid = trace.valid & active[:, None]
    cache, charged = charge(cache, qid, trace.prefix, valid)
    tokens = jnp.sum(jnp.where(charged, trace.tokens, 0.0), axis=1)         # t_env after reuse
    parts = jnp.sum(jnp.where(charged[..., None], trace.parts, 0.0), axis=1)
    # Actor scoring at a prefix is charged once (the paper's VinePPO: "scoring is charged
    # once to the first requesting path"): the decisions' own namespace in the cache.
    scoring = valid & (trace.decided >= 0)
    cache, scored = charge(cache, qid, trace.decided, scoring, table="scored")
    actor = jnp.sum(jnp.where(scored[..., None], trace.actor, 0.0), axis=1)  # t_actor after reuse
    return cache, Cost(tokens, jnp.sum(charged, axis=1).astype(jnp.int32), actor, parts,
                       jnp.sum(scored, axis=1).astype(jnp.int32))


def trial_cost(cache: Optional[ExecutionCache], model: EnvModel, tree: Tree,
               path: BackupPath, leaf_cost: Cost, leaf_trace: Trace, qid: chex.Array,
               active: chex.Array) -> Tuple[Optional[ExecutionCache], Cost]:
    """(the updated cache, Cost [B]) of one trial step: `traversal_cost` without a cache
    (cache None, returned as it is), `ledger_cost` with one."""
    if cache is None:
        return None, traversal_cost(model, tree, path, active, leaf_cost)
    return ledger_cost(cache, model, tree, path, leaf_trace, qid, active)
