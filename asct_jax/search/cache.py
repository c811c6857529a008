"""The search's execution cache (the ASCT paper's WTB) and AgentUCT's remaining-cost T_hat.

A staged-workflow environment (search.workflow: `workflow_of(env, params)` is a
`WorkflowTree`) names every workflow prefix by a node p in [0, P); a question q in [0, Q)
and p determine the state. The cache holds, per question, which prefixes a search has executed:

  executed[q, p] = True  <=>  some earlier trial (of this method and seed, over the whole
                              training run) executed the edge into prefix p of question q;
  scored[q, p]   = True  <=>  some earlier decision of THIS iteration (train step) scored
                              the actor's probabilities at prefix p of question q.

The paper's cache (WTB) is per method, seed and worker: executed workflows are reused for
the whole run. The actor's probabilities are reused only under one frozen actor, so every
iteration starts with an empty scored table (`new_iteration`).

Executing a cached prefix costs no new auxiliary tokens; a partial hit executes only the
uncached suffix (the ledger that charges and marks it: search.accounting).

T_hat(v, a), the expected uncached remaining cost of taking a at v (WorkflowTree's nominal
`edge_tokens` as the proxy):

  uc(v, a)    = edge_tokens(v, a) * [child(v, a) not cached]
  T_hat(v, a) = uc(v, a) + mean over the complete suffix paths below child(v, a) (each path
                weighted equally) of the sum of uc over their edges.

Computed for every node at once by a bottom-up DP over the depth levels (`t_hat_table`):
  n(p) = 1 if p is terminal else sum_{a legal} n(child(p, a))              (number of paths)
  c(p) = 0 if p is terminal else sum_{a legal} [n(child) uc(p, a) + c(child)]  (their costs)
  T_hat(v, a) = uc(v, a) + c(child) / n(child).
`remaining_costs` reads the table at every node of the search trees. Everything is pure
and jit-able; shapes in the docstrings (Q questions, P prefixes, K candidates, B trees,
N tree nodes).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.workflow import WorkflowTree
from asct_jax.search.tree import Tree
from asct_jax.search.workflow import workflow_of


@chex.dataclass(frozen=True)
class ExecutionCache:
    """Which workflow prefixes have been executed, one namespace per method and seed.

    Attributes:
      executed: [Q, P] bool, prefix p of question q has been executed by a search (kept
        for the run).
      scored: [Q, P] bool, the actor's probabilities at prefix p of question q have been
        computed for a continuation in this iteration (charged once per iteration, as the
        paper's VinePPO ledger does under one frozen actor).
    """

    executed: chex.Array
    scored: chex.Array

    @property
    def num_questions(self) -> int:
        return self.executed.shape[0]

    @property
    def num_prefixes(self) -> int:
        return self.executed.shape[1]


def init_cache(env, params: Any) -> Optional[ExecutionCache]:
    """An empty cache for `env`'s question pool, or None when env is not a staged
    workflow (workflow_of is None: no cache, every execution is charged)."""
    wf = workflow_of(env, params)
    if wf is None:
        return None
    shape = (env.num_questions(params), wf.children.shape[0])
    return ExecutionCache(executed=jnp.zeros(shape, bool), scored=jnp.zeros(shape, bool))


def new_iteration(cache: Optional[ExecutionCache]) -> Optional[ExecutionCache]:
    """The cache at the start of a training iteration (one train step): `scored` emptied
    (the actor has changed, its probabilities are charged again), `executed` kept (the
    executed workflows have not). None stays None."""
    if cache is None:
        return None
    return cache.replace(scored=jnp.zeros_like(cache.scored))


def lookup(cache: ExecutionCache, qid: chex.Array, prefix: chex.Array,
           table: str = "executed") -> chex.Array:
    """[...] bool: cache.<table>[qid, prefix] (qid, prefix broadcast together; out-of-range
    prefixes read False). table: "executed" or "scored"."""
    p = jnp.asarray(prefix, jnp.int32)
    ok = (p >= 0) & (p < cache.num_prefixes)
    return ok & getattr(cache, table)[jnp.asarray(qid, jnp.int32),
                                      jnp.clip(p, 0, cache.num_prefixes - 1)]


# ------------------------------------------------------------------------------ T_hat
def uncached_edge_tokens(wf: WorkflowTree, executed: chex.Array) -> chex.Array:
    """[P, K] f32: uc(p, a) = edge_tokens(p, a) if child(p, a) is legal and not cached,
    else 0. executed: [P] bool (one question's row)."""
    chex.assert_shape(executed, wf.terminal.shape)
    legal = wf.children >= 0
    cached = executed[jnp.clip(wf.children, 0)]
    return jnp.where(legal & ~cached, wf.edge_tokens.astype(jnp.float32), 0.0)


def suffix_costs(wf: WorkflowTree, executed: chex.Array,
                 num_levels: int) -> Tuple[chex.Array, chex.Array]:
    """Bottom-up DP over depth levels num_levels - 1, ..., 0 (static; at least the
    WorkflowTree's max depth + 1), one vectorised update of every node per level.

    Args:
      wf: the WorkflowTree ([P, K] children / edge_tokens, [P] terminal / depth).
      executed: [P] bool, one question's cache row.
      num_levels: static number of depth levels.

    Returns:
      (n [P] f32: complete suffix paths below p (1 at a terminal),
       mean [P] f32: mean over those paths of their summed uncached edge tokens (0 where
       n = 0, a dead end)).
    """
    legal = wf.children >= 0
    ch = jnp.clip(wf.children, 0)
    uc = uncached_edge_tokens(wf, executed)
    n0 = wf.terminal.astype(jnp.float32)

    def level(i, nc):
        n, c = nc
        at = (wf.depth == num_levels - 1 - i) & ~wf.terminal
        n_ch = jnp.where(legal, n[ch], 0.0)                               # [P, K]
        c_ch = jnp.where(legal, c[ch], 0.0)
        n_new = jnp.sum(n_ch, -1)                                         # n(p) = sum n(child)
        c_new = jnp.sum(n_ch * uc + c_ch, -1)                             # c(p) = sum n(child) uc + c(child)
        return jnp.where(at, n_new, n), jnp.where(at, c_new, c)

    n, c = jax.lax.fori_loop(0, num_levels, level, (n0, jnp.zeros_like(n0)))
    return n, jnp.where(n > 0, c / jnp.maximum(n, 1.0), 0.0)


def t_hat_table(wf: WorkflowTree, executed: chex.Array, num_levels: int) -> chex.Array:
    """[P, K] f32: T_hat(v, a) for every prefix v and candidate a of one question (0 where
    a is illegal). executed: [P] bool; vmap over questions / trees."""
    _, mean = suffix_costs(wf, executed, num_levels)
    uc = uncached_edge_tokens(wf, executed)
    legal = wf.children >= 0
    return jnp.where(legal, uc + mean[jnp.clip(wf.children, 0)], 0.0)  # uc(v,a) + E_suffix[uc]


# ----------------------------------------------------------- T_hat of the search trees
def tree_prefixes(model, tree: Tree) -> chex.Array:
    """[B, N] i32: the WorkflowTree node of every tree node's state (workflow envs)."""
    fn = lambda s: model.env.workflow_node(s, model.env_params)  # noqa: E731
    return jax.vmap(jax.vmap(fn))(tree.states).astype(jnp.int32)


def remaining_costs(model, tree: Tree, qid: chex.Array,
                    cache: Optional[ExecutionCache]) -> Tuple[Optional[chex.Array], chex.Array]:
    """T_hat of the trees (the DP above over the WorkflowTree with each tree's question
    row of the cache, all uncached without a cache).

    Args: model: search.types.EnvModel; tree: the batched Tree; qid: [B] i32;
      cache: ExecutionCache or None.

    Returns:
      (table [B, P, K] f32: T_hat(v, a) of every prefix v of each tree's question, None
       for an environment without a workflow;
       node_t_hat [B, N, K] f32: T_hat of every tree node; env.action_costs (tree.costs)
       without a workflow.)
    """
    env = model.env
    wf = workflow_of(env, model.env_params)
    if wf is None:
        return None, tree.costs
    p = wf.children.shape[0]
    chex.assert_shape(wf.children, (p, env.num_actions))
    rows = (jnp.zeros((tree.batch_size, p), bool) if cache is None
            else cache.executed[qid])
    table = jax.vmap(t_hat_table, in_axes=(None, 0, None))(
        wf, rows, int(env.max_turns) + 1)                                   # [B, P, K]
    pref = jnp.clip(tree_prefixes(model, tree), 0, p - 1)
    return table, jnp.take_along_axis(table, pref[..., None], axis=1)


def state_t_hat(model, table: Optional[chex.Array], state: Any) -> chex.Array:
    """[K] f32: T_hat(state, .) of ONE state: its row of `table` [P, K] (workflow envs),
    else env.action_costs(state)."""
    env, p = model.env, model.env_params
    if table is None:
        return jnp.asarray(env.action_costs(state, p), jnp.float32)
    v = jnp.clip(env.workflow_node(state, p), 0, table.shape[0] - 1)
    return table[v]
