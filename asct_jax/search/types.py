"""The search's types (mctx's `base.py`): its static config, the callables it takes, what
it steps with, what it carries and what it returns. B trees, K candidates, D the depth
cap, E ledger entries per tree; [] for ONE tree / node.

Token counts have one meaning each, everywhere in search/:
  env_tokens   t_env, the realized env.action_costs of the executed environment steps;
  env_parts    t_env by category (env.cost_parts: ragspace's generator input / output,
               query embedding, reranker input; the paper's Table 3), [..., C];
  actor_tokens t_actor, the actor-scoring tokens of pi_old continuation decisions: in
               every unit of search.scoring.ACTOR_UNITS ([..., U]) inside the search, in
               SearchConfig.actor_unit in SearchOutput.actor_tokens;
  aux_tokens   T_aux = env_tokens + actor_tokens (the paper's auxiliary tokens).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Tuple

import chex
import jax.numpy as jnp

from asct_jax.envs.play import PolicyFn  # noqa: F401  (ONE state -> (logp [K], value []))
from asct_jax.search.cache import ExecutionCache
from asct_jax.search.scoring import ACTOR_UNITS, ChatLengths
from asct_jax.search.tree import Tree


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Static search configuration (hashable: a jit static argument). The rules and their
    hyperparameters (c_exp, c_tok) are not here: they are bound into the callables of
    SearchRules (search.methods.paper_rules).

    Attributes:
      num_simulations: trials per tree (>= 1); the tree holds num_simulations + 1 nodes.
      max_depth: D, edges from the root at most (>= 1), or None: env.max_turns (no cap).
      num_leaf_rollouts: continuations per leaf evaluation (their mean return).
      node_policy: evaluate policy_fn at every expanded node (its prior and critic in the
        tree); False: a uniform prior and value 0 below the root.
      actor_unit: the unit of t_actor in SearchOutput.actor_tokens and aux_tokens
        (search.scoring.ACTOR_UNITS; "chat" units need the search's ChatLengths).
    """

    num_simulations: int = 12
    max_depth: Optional[int] = None
    num_leaf_rollouts: int = 1
    node_policy: bool = False
    actor_unit: str = "words"

    def __post_init__(self):
        if not isinstance(self.num_simulations, int) or self.num_simulations < 1:
            raise ValueError(f"num_simulations must be an int >= 1, got {self.num_simulations!r}")
        if self.max_depth is not None and (not isinstance(self.max_depth, int) or self.max_depth < 1):
            raise ValueError(f"max_depth must be None or an int >= 1, got {self.max_depth!r}")
        if not isinstance(self.num_leaf_rollouts, int) or self.num_leaf_rollouts < 1:
            raise ValueError(f"num_leaf_rollouts must be an int >= 1, got {self.num_leaf_rollouts!r}")
        if self.actor_unit not in ACTOR_UNITS:
            raise ValueError(f"actor_unit must be one of {ACTOR_UNITS}, got {self.actor_unit!r}")

    def depth(self, env) -> int:
        """D (static): max_depth, or env.max_turns when None."""
        return int(env.max_turns) if self.max_depth is None else self.max_depth


@chex.dataclass(frozen=True)
class NodeStats:
    """What a selection or expansion rule sees of ONE node, all [K] except `value` and
    `visits` [].

    Attributes:
      child_visits: [K] int32, n(v, a).
      child_value_sum: [K] float32, sum of the utilities backed up through a.
      prior_logp: [K] float32, log pi_old(a|s) (-inf allowed where illegal).
      mask: [K] bool, selectable (legal and restorable).
      costs: [K] float32, env.action_costs of a.
      value: [] float32, the critic V(s) stored at the node.
      t_hat: [K] float32, T_hat(v, a), the expected uncached remaining cost (search.cache);
        None: `costs`.
      visits: [] int32, n(v): trials through the node; None: sum_a n(v, a).
    """

    child_visits: chex.Array
    child_value_sum: chex.Array
    prior_logp: chex.Array
    mask: chex.Array
    costs: chex.Array
    value: chex.Array
    t_hat: chex.Array = None
    visits: chex.Array = None


# (key, NodeStats) -> int32 [] candidate: which child a descent takes at a node.
SelectionFn = Callable[[chex.PRNGKey, NodeStats], chex.Array]
# (key, NodeStats) -> (any untried selectable child [] bool, the one drawn [] i32).
ExpansionFn = Callable[[chex.PRNGKey, NodeStats], Tuple[chex.Array, chex.Array]]
# (model, table [P, K] | None, state, cands [K, A], legal [K]) -> (logits [K] of the
# step's candidate, actor-scoring tokens [U] f32 (every unit), the deciding workflow node
# [] i32 or -1 when no actor decides): one step of a continuation (search.continuation).
ContinuationFn = Callable[..., Tuple[chex.Array, chex.Array, chex.Array]]


class SearchRules(NamedTuple):
    """The callables of one search, their hyperparameters bound (functools.partial):
    selection at every node; expansion at a node with untried children (None: selection
    decides there too); the continuation policy of leaf evaluations."""

    selection: SelectionFn
    expansion: Optional[ExpansionFn]
    continuation: ContinuationFn


class EnvModel(NamedTuple):
    """What the search steps and evaluates with (closed over, never vmapped).

    env: an `asct_jax.envs.base.Environment` (static); env_params: its params (pytree,
    may be traced); policy_fn: ONE state -> (logp [K], value []); chat: the decisions'
    chat-prompt length tables (search.scoring.ChatLengths) or None (chat units 0).
    """

    env: Any
    env_params: Any
    policy_fn: PolicyFn
    chat: Optional[ChatLengths] = None


class Cost(NamedTuple):
    """What executing actions inside the search cost, of one leading shape S ([] for one
    trial of one tree, [B] batched): env_tokens [S] f32 (t_env), env_calls [S] i32
    (environment steps charged), actor_tokens [S, U] f32 (t_actor in every unit of
    ACTOR_UNITS), env_parts [S, C] f32 (t_env by env.cost_parts), actor_decisions [S] i32
    (actor decisions charged)."""

    env_tokens: chex.Array
    env_calls: chex.Array
    actor_tokens: chex.Array
    env_parts: chex.Array
    actor_decisions: chex.Array


def zero_cost(shape: Tuple[int, ...], num_parts: int) -> Cost:
    """A Cost of zeros of leading shape `shape` and C = num_parts categories."""
    z = jnp.zeros(shape, jnp.float32)
    return Cost(z, jnp.zeros(shape, jnp.int32), jnp.zeros(shape + (len(ACTOR_UNITS),)),
                jnp.zeros(shape + (num_parts,)), jnp.zeros(shape, jnp.int32))


class NodeInfo(NamedTuple):
    """What the environment and the policy say about ONE state: prior_logp [K] f32 (-inf
    where illegal), value [] f32, legal [K] bool, searchable [K] bool (legal & restorable),
    costs [K] f32."""

    prior_logp: chex.Array
    value: chex.Array
    legal: chex.Array
    searchable: chex.Array
    costs: chex.Array


class Selection(NamedTuple):
    """Where `simulate`'s descent ended, [B] each.

    parent: i32, the last node reached; action: i32, the candidate chosen there.
    expand: bool, (parent, action) is a new edge to expand; else `leaf` is re-evaluated.
    leaf: i32, the node to evaluate when not expanding (NO_PARENT when expanding).
    """

    parent: chex.Array
    action: chex.Array
    expand: chex.Array
    leaf: chex.Array


class BackupPath(NamedTuple):
    """The edges `backward` updated, deepest first, [B, D] each: edge i goes from node
    nodes[i] through actions[i]; valid[i] False past the root (or for an inactive tree)."""

    nodes: chex.Array
    actions: chex.Array
    valid: chex.Array


class Trace(NamedTuple):
    """The edges a trial executed, [..., E] each (the ledger's entries): prefix i32, the
    WorkflowTree node the edge reaches (0 for other environments); tokens f32, its
    realized env tokens; valid bool, the entry is an executed edge; decided i32, the node
    whose actor decision chose the edge (-1: chosen by a rule, no actor scoring);
    actor [..., E, U] f32, that decision's actor-scoring tokens in every unit;
    parts [..., E, C] f32, the edge's env tokens by category."""

    prefix: chex.Array
    tokens: chex.Array
    valid: chex.Array
    decided: chex.Array
    actor: chex.Array
    parts: chex.Array


def empty_trace(n: int, num_parts: int = 1) -> Trace:
    """A Trace of n entries, none valid (C = num_parts cost categories)."""
    return Trace(jnp.zeros((n,), jnp.int32), jnp.zeros((n,), jnp.float32),
                 jnp.zeros((n,), bool), jnp.full((n,), -1, jnp.int32),
                 jnp.zeros((n, len(ACTOR_UNITS)), jnp.float32),
                 jnp.zeros((n, num_parts), jnp.float32))


class SearchState(NamedTuple):
    """State of `search`'s loop over trials: the trees, the cost so far ([B]) and the
    execution cache (None without one)."""

    tree: Tree
    cost: Cost
    cache: Optional[ExecutionCache] = None


@chex.dataclass(frozen=True)
class SearchOutput:
    """What `search` returns (B trees, K candidates).

    Attributes:
      q: [B, K] f32, Q(s, a): mean backed-up return through root action a (0 if unvisited).
      visits: [B, K] i32, trials through each root action (sum = trials run).
      q_mask: [B, K] bool, visits > 0: the actions with an estimate.
      prior_logp: [B, K] f32, log pi_old(a|s) at the root (-inf where illegal).
      root_value: [B] f32, the critic V(s) at the root (policy_fn's value).
      search_value: [B] f32, mean backed-up return of all trials from the root.
      legal: [B, K] bool, legal root candidates.
      searchable: [B, K] bool, legal and restorable root candidates.
      env_tokens: [B] f32, t_env charged (after reuse with a cache).
      actor_tokens: [B] f32, t_actor charged (after reuse with a cache), in
        SearchConfig.actor_unit.
      aux_tokens: [B] f32, T_aux = env_tokens + actor_tokens.
      env_calls: [B] i32, environment steps charged (uncached ones with a cache).
      actor_units: [B, U] f32, t_actor in every unit of search.scoring.ACTOR_UNITS.
      env_parts: [B, C] f32, t_env by category (env.cost_parts).
      actor_decisions: [B] i32, the actor decisions whose scoring was charged.
      tree: the final Tree.
      cache: the updated ExecutionCache (None when searched without one).
    """

    q: chex.Array
    visits: chex.Array
    q_mask: chex.Array
    prior_logp: chex.Array
    root_value: chex.Array
    search_value: chex.Array
    legal: chex.Array
    searchable: chex.Array
    env_tokens: chex.Array
    actor_tokens: chex.Array
    aux_tokens: chex.Array
    env_calls: chex.Array
    actor_units: chex.Array
    env_parts: chex.Array
    actor_decisions: chex.Array
    tree: Tree
    cache: Optional[ExecutionCache] = None
