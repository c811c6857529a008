"""Batched ASCT tree search over an environment's candidate actions (docs/methods.md, ASCT > Search).

One call searches B independent trees, one per root state (an actor-visited state s),
each with N = num_simulations trials, all under one jit (lax.fori_loop over trials, vmap
over trees, lax.while_loop for descent and continuations, lax.scan for the backup). The
loop is split the mctx way; one trial (the body of `search`'s loop) is:

  0. `remaining_costs`: T_hat(v, a) of every tree node from the execution cache (workflow
     environments; search.cache) or env.action_costs (other environments);
  1. `simulate`: from the root, pick a candidate at each node until an untried edge, the
     depth limit D (config.max_depth edges; None: env.max_turns, i.e. none) or a node that
     cannot be expanded (terminal, or no legal & restorable candidate) is reached. At a
     node with untried children config.expansion picks one: "prior" leaves it to the
     selection function (the paper's rules try untried children first, uniformly or
     cost-weighted; the earlier rules in decreasing prior), "uniform" / "cost_weighted"
     (P(a) ~ exp(-c_tok T_hat(v, a))) draw one; elsewhere the selection function decides;
  2. `expand`: step the environment from the parent's stored state with cands[k] and store
     the child (state, legal mask, costs, prior, critic value, done);
  3. `evaluate_leaf`: v = 0 if terminal, else (leaf_eval="rollout") the mean return of
     config.num_leaf_rollouts continuations to the end of the episode, by
     config.continuation: "uniform" / "cost_weighted" among the legal actions, or "actor"
     (pi_old); or (leaf_eval="critic") the critic V(s_leaf);
  4. `backward`: walking to the root, G <- r(parent, k) + G (gamma = 1), adding G to the
     edge and node statistics; with a continuation to the end G at the root is the
     trial's terminal utility U (the sum of rewards from s);
  5. the cost: without a cache `simulation_cost` charges every executed edge
     (config.charge); with one, `ledger_cost` charges only the uncached ones (search.cache).

The ASCT paper's search (`paper_config`, rules "uniform", "uct", "agentuct"): B terminal
trials, no depth cap, no value function at leaves, every root action tried first
(B >= |A(s)|), Q_hat(s, a) = mean U of the trials whose first action is a.

The selection function is passed in: `(key, node: NodeStats) -> int32 []`, e.g.
`functools.partial(selection.agentuct, c_exp=1.4, c_tok=1e-4)` or
`selection.make_selection("agentuct", config.asct.search)`.

Q(s_root, a) = mean backed-up return of the trials through a: the rewards along the path
from the root plus the leaf value (undiscounted, counted from the root). An action the
search never tried has no estimate (q_mask False, q = 0).

Auxiliary tokens, aux_tokens = t_env + t_actor:
  t_env: environment tokens, the realized env.action_costs of the executed edges (tree
    steps and continuation steps). Without a cache (cache=None): every executed edge
    (config.charge: every edge of every trial's path, "traversal", or only the expanded
    edges, "expansion"; every continuation step). With an ExecutionCache (`search(...,
    cache=)`, one per method and seed, carried across the training run): only the edges
    into prefixes not executed before; trees of one question searched in the same step
    charge a shared new prefix once (the lowest tree index claims it), so totals equal a
    sequential execution in tree order. env_calls counts the charged steps likewise.
  t_actor: actor-scoring tokens of actor continuations: per actor decision, the non-PAD
    observation tokens plus the legal candidates' non-PAD tokens.

Notes.
* Stochastic environments: each edge's transition (next state, reward) is sampled once,
  at expansion, and kept; later trials through the edge reuse it (as mctx does with a
  model). Q(s, a) of one tree is therefore conditional on that sampled outcome; it is
  unbiased on average over trees / episodes. Continuations share the stored state's own
  environment key unless config.rekey_rollouts (see rollout_value).
* policy_fn is called once per root (its prior is returned as prior_logp). With
  config.node_policy (leaf_eval="critic" or continuation="actor") also once per expansion
  (the new node's prior and critic) and per actor continuation step; with a rule
  continuation never again (nodes below the root get a uniform prior and value 0).
* T_hat uses the cache as it was at the start of the trial step.
* Node slots: trial s writes slot s + 1 only if it expands; an unused slot keeps
  its initial values (visits 0, no parent).
* PRNG keys: trial s uses split(fold_in(key, s), B)[b] for tree b, split again into
  (selection key, leaf-evaluation key).
* The stage functions below work on the batched Tree ([B, ...]) and vmap a one-tree
  kernel; they are pure and jit-able.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import PAD_ID
from asct_jax.search import cache as cache_lib
from asct_jax.search import selection
from asct_jax.search.cache import ExecutionCache
from asct_jax.search.rollout_value import PolicyFn, rekey_state, sample_candidate, state_done
from asct_jax.search.selection import NodeStats, SelectionFn
from asct_jax.search.tree import NO_PARENT, ROOT_INDEX, UNVISITED, Tree, init_tree

EXPANSIONS = ("prior", "uniform", "cost_weighted")
CONTINUATIONS = ("actor", "uniform", "cost_weighted")


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Static search configuration (hashable: safe as a jit static argument).

    The selection rule and its hyperparameters (c, beta, eps, unvisited_first, c_exp,
    c_tok) are not here: they are bound in the selection function passed to `search`
    (selection.make_selection); c_tok is here too, for expansion and continuation.

    Attributes:
      num_simulations: trials per tree (>= 1); the tree holds num_simulations + 1 nodes.
      max_depth: D, maximum number of edges from the root (>= 1), or None: no cap
        (env.max_turns).
      leaf_eval: "rollout" (continuations to the end) or "critic" (the policy_fn value).
      num_leaf_rollouts: continuations per leaf evaluation when leaf_eval == "rollout".
      charge: how tree steps are charged without a cache (aux_tokens and env_calls).
        "traversal" (the paper's accounting): every trial pays every edge on its path, as
        a search that re-executes the workflow from the root would. "expansion": only the
        edge it expands, which is what this implementation steps (states are kept).
        Continuations are always charged in full. With a cache, only uncached edges.
      rekey_rollouts: continuations draw fresh environment randomness (state.key) instead
        of the stored state's own (see rollout_value's docstring).
      expansion: at a node with untried children: "prior" (the selection function
        decides, today's), "uniform" or "cost_weighted" (P(a) ~ exp(-c_tok T_hat(v, a))).
      continuation: the continuation policy: "actor" (pi_old), "uniform" or
        "cost_weighted" (among the legal actions).
      c_tok: the token weight of cost-weighted expansion and continuation.
    """

    num_simulations: int = 16
    max_depth: Optional[int] = 3
    leaf_eval: str = "rollout"
    num_leaf_rollouts: int = 1
    charge: str = "traversal"
    rekey_rollouts: bool = False
    expansion: str = "prior"
    continuation: str = "actor"
    c_tok: float = 1e-4

    def __post_init__(self):
        if not isinstance(self.num_simulations, int) or self.num_simulations < 1:
            raise ValueError(f"num_simulations must be an int >= 1, got {self.num_simulations!r}")
        if self.max_depth is not None and (not isinstance(self.max_depth, int) or self.max_depth < 1):
            raise ValueError(f"max_depth must be None or an int >= 1, got {self.max_depth!r}")
        if self.leaf_eval not in LEAF_EVALS:
            raise ValueError(f"leaf_eval must be one of {tuple(LEAF_EVALS)}, got {self.leaf_eval!r}")
        if self.charge not in CHARGES:
            raise ValueError(f"charge must be one of {tuple(CHARGES)}, got {self.charge!r}")
        if not isinstance(self.num_leaf_rollouts, int) or self.num_leaf_rollouts < 1:
            raise ValueError(f"num_leaf_rollouts must be an int >= 1, got {self.num_leaf_rollouts!r}")
        if self.expansion not in EXPANSIONS:
            raise ValueError(f"expansion must be one of {EXPANSIONS}, got {self.expansion!r}")
        if self.continuation not in CONTINUATIONS:
            raise ValueError(f"continuation must be one of {CONTINUATIONS}, got {self.continuation!r}")
        if not isinstance(self.c_tok, (int, float)) or isinstance(self.c_tok, bool) or self.c_tok < 0:
            raise ValueError(f"c_tok must be a number >= 0, got {self.c_tok!r}")

    def depth(self, env) -> int:
        """D (static): max_depth, or env.max_turns when None."""
        return int(env.max_turns) if self.max_depth is None else self.max_depth

    @property
    def node_policy(self) -> bool:
        """policy_fn is evaluated at expansions (a critic leaf or actor continuations)."""
        return self.leaf_eval == "critic" or self.continuation == "actor"


def make_search_config(config: Any = None, **overrides) -> SearchConfig:
    """SearchConfig from a SearchConfig, a dict or an ml_collections.ConfigDict (+ overrides).

    A dict / ConfigDict may also hold the selection hyperparameters
    (selection.HYPERPARAMS: what `asct.search` holds); those that are not SearchConfig
    fields are skipped here (read them with selection.make_selection; c_tok goes to both).
    Any other unknown field raises a one-line ValueError naming it.
    """
    known = {f.name for f in dataclasses.fields(SearchConfig)}
    if config is None:
        fields = {}
    elif isinstance(config, SearchConfig):
        fields = dataclasses.asdict(config)
    elif isinstance(config, Mapping) or hasattr(config, "to_dict"):
        fields = dict(config.to_dict() if hasattr(config, "to_dict") else config)
        fields = {k: v for k, v in fields.items() if k in known or k not in selection.HYPERPARAMS}
    else:
        raise ValueError(f"config must be a SearchConfig, dict or ConfigDict, got {type(config)}")
    fields.update(overrides)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"unknown SearchConfig fields {unknown}; allowed: {sorted(known)} (the selection "
            f"rule and {list(selection.HYPERPARAMS)} go to selection.make_selection)")
    return SearchConfig(**fields)


# Each paper rule's expansion and rule continuation.
PAPER_EXPANSION = {"uniform": "uniform", "uct": "uniform", "agentuct": "cost_weighted"}


def paper_config(rule: str, num_simulations: int = 12, actor_rollout: bool = False,
                 **overrides) -> SearchConfig:
    """The ASCT paper's search for `rule` ("uniform", "uct", "agentuct"): num_simulations
    terminal trials (the paper: 12), no depth cap, one continuation to the end per trial
    (no value function), expanding and continuing uniformly (Uniform, UCT) or cost-weighted
    (AgentUCT); actor_rollout: pi_old continuations instead (ASCT-ActorRollout). Pair it
    with selection.make_selection(rule, ...)."""
    if rule not in PAPER_EXPANSION:
        raise ValueError(f"rule must be one of {tuple(PAPER_EXPANSION)}, got {rule!r}")
    e = PAPER_EXPANSION[rule]
    fields = dict(num_simulations=num_simulations, max_depth=None, leaf_eval="rollout",
                  num_leaf_rollouts=1, expansion=e, continuation="actor" if actor_rollout else e)
    return make_search_config(fields, **overrides)


# ------------------------------------------------------------------------ typed state
class EnvModel(NamedTuple):
    """What the search steps and evaluates with (closed over, never vmapped).

    env: an `asct_jax.envs.base.Environment` (static); env_params: its params (pytree,
    may be traced); policy_fn: ONE state -> (logp [K], value []).
    """

    env: Any
    env_params: Any
    policy_fn: PolicyFn


class Cost(NamedTuple):
    """What executing actions inside the search cost, all of the same shape ([] for one
    trial of one tree, [B] batched): aux_tokens f32, the environment tokens charged
    (t_env); env_calls i32, the environment steps charged; actor_tokens f32, the
    actor-scoring tokens of actor continuations (t_actor)."""

    aux_tokens: chex.Array
    env_calls: chex.Array
    actor_tokens: chex.Array = 0.0


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
    realized cost; valid bool, the entry is an executed edge; decided i32, the node whose
    actor decision chose the edge (-1: chosen by the search's rule, no actor scoring);
    actor f32, that decision's actor-scoring tokens."""

    prefix: chex.Array
    tokens: chex.Array
    valid: chex.Array
    decided: chex.Array
    actor: chex.Array


def empty_trace(n: int) -> Trace:
    """A Trace of n entries, none valid."""
    return Trace(jnp.zeros((n,), jnp.int32), jnp.zeros((n,), jnp.float32),
                 jnp.zeros((n,), bool), jnp.full((n,), -1, jnp.int32),
                 jnp.zeros((n,), jnp.float32))


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
      aux_tokens: [B] f32, t_env + t_actor.
      env_calls: [B] i32, environment steps charged (uncached ones with a cache).
      t_env: [B] f32, environment tokens charged (after reuse with a cache).
      t_actor: [B] f32, actor-scoring tokens of actor continuations.
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
    aux_tokens: chex.Array
    env_calls: chex.Array
    t_env: chex.Array
    t_actor: chex.Array
    tree: Tree
    cache: Optional[ExecutionCache] = None


# ------------------------------------------------------------------- one-node helpers
def node_info(model: EnvModel, state: Any, use_policy: bool = True) -> NodeInfo:
    """NodeInfo of ONE state (no batch axis). use_policy=False (static): no policy_fn
    call, a uniform prior over the legal candidates and value 0."""
    env, env_params = model.env, model.env_params
    _, legal = env.legal_actions(state, env_params)
    legal = jnp.asarray(legal, bool)
    if use_policy:
        logp, value = model.policy_fn(state)
        chex.assert_shape(logp, (env.num_actions,))
    else:
        logp = -jnp.log(jnp.maximum(jnp.sum(legal), 1).astype(jnp.float32)) * jnp.ones(legal.shape)
        value = jnp.float32(0.0)
    searchable = legal & jnp.asarray(env.restorable(state, env_params), bool)
    costs = jnp.asarray(env.action_costs(state, env_params), jnp.float32)
    logp = jnp.where(legal, logp.astype(jnp.float32), -jnp.inf)
    return NodeInfo(logp, jnp.asarray(value, jnp.float32).reshape(()), legal, searchable, costs)


def node_stats(tree: Tree, node: chex.Array, t_hat: Optional[chex.Array] = None) -> NodeStats:
    """What a selection function sees of node `node` of ONE (unbatched) tree; t_hat:
    [N, K] T_hat of every node (None: NodeStats.t_hat None)."""
    return NodeStats(
        child_visits=tree.children_visits[node],
        child_value_sum=tree.children_value_sum[node],
        prior_logp=tree.prior_logp[node],
        mask=tree.searchable[node],
        costs=tree.costs[node],
        value=tree.raw_value[node],
        t_hat=None if t_hat is None else t_hat[node],
        visits=tree.node_visits[node],
    )


def is_stop(tree: Tree, node: chex.Array) -> chex.Array:
    """[] bool, for ONE tree: nothing can be expanded below `node` (done, or no
    selectable candidate)."""
    return tree.terminal[node] | ~jnp.any(tree.searchable[node])


def root_active(tree: Tree) -> chex.Array:
    """[B] bool: the trees whose root can be searched (a done root is not)."""
    return ~jax.vmap(is_stop, in_axes=(0, None))(tree, ROOT_INDEX)


# ------------------------------------------------------------------ 0. remaining costs
def tree_prefixes(model: EnvModel, tree: Tree) -> chex.Array:
    """[B, N] i32: the WorkflowTree node of every tree node's state (workflow envs)."""
    fn = lambda s: model.env.workflow_node(s, model.env_params)  # noqa: E731
    return jax.vmap(jax.vmap(fn))(tree.states).astype(jnp.int32)


def remaining_costs(model: EnvModel, tree: Tree, qid: chex.Array,
                    cache: Optional[ExecutionCache]) -> Tuple[Optional[chex.Array], chex.Array]:
    """T_hat of the trees (search.cache's DP over the WorkflowTree with each tree's
    question row of the cache, all uncached without a cache).

    Args: model; tree: the batched Tree; qid: [B] i32; cache: ExecutionCache or None.

    Returns:
      (table [B, P, K] f32: T_hat(v, a) of every prefix v of each tree's question, None
       for an environment without a workflow;
       node_t_hat [B, N, K] f32: T_hat of every tree node; env.action_costs (tree.costs)
       without a workflow.)
    """
    env = model.env
    wf = env.workflow(model.env_params)
    if wf is None:
        return None, tree.costs
    p = wf.children.shape[0]
    chex.assert_shape(wf.children, (p, env.num_actions))
    rows = (jnp.zeros((tree.batch_size, p), bool) if cache is None
            else cache.executed[qid])
    table = jax.vmap(cache_lib.t_hat_table, in_axes=(None, 0, None))(
        wf, rows, int(env.max_turns) + 1)                                   # [B, P, K]
    pref = jnp.clip(tree_prefixes(model, tree), 0, p - 1)
    return table, jnp.take_along_axis(table, pref[..., None], axis=1)


def state_t_hat(model: EnvModel, table: Optional[chex.Array], state: Any) -> chex.Array:
    """[K] f32: T_hat(state, .) of ONE state: its row of `table` [P, K] (workflow envs),
    else env.action_costs(state)."""
    env, p = model.env, model.env_params
    if table is None:
        return jnp.asarray(env.action_costs(state, p), jnp.float32)
    v = jnp.clip(env.workflow_node(state, p), 0, table.shape[0] - 1)
    return table[v]


# ------------------------------------------------------------------------ 1. simulate
class _Descent(NamedTuple):
    """lax.while_loop state of one tree's descent (all [])."""

    node: chex.Array     # i32, current node
    depth: chex.Array    # i32, selections made so far
    action: chex.Array   # i32, last chosen candidate
    expand: chex.Array   # bool, the descent ended at a new edge (node, action)
    leaf: chex.Array     # i32, node to evaluate (NO_PARENT when expanding)
    going: chex.Array    # bool, continue descending
    key: chex.PRNGKey


def expansion_choice(key: chex.PRNGKey, tree: Tree, node: chex.Array, t_hat: chex.Array,
                     expansion: str, c_tok: float) -> Tuple[chex.Array, chex.Array]:
    """ONE tree: (any untried selectable child at `node` [] bool, the one drawn [] i32):
    uniformly ("uniform") or with P(a) ~ exp(-c_tok T_hat(node, a)) ("cost_weighted").
    t_hat: [N, K]."""
    untried = tree.searchable[node] & (tree.children_index[node] == UNVISITED)
    logits = (jnp.zeros(untried.shape, jnp.float32) if expansion == "uniform"
              else -c_tok * t_hat[node])                                   # log P ~ -c_tok T_hat
    return jnp.any(untried), selection.random_argmax(key, jnp.zeros(untried.shape), untried, logits)


def _descend(tree: Tree, t_hat, key: chex.PRNGKey, selection_fn: SelectionFn,
             max_depth: int, expansion: str, c_tok: float) -> Selection:
    """`simulate` on ONE (unbatched) tree; returns a Selection of [] fields."""

    def body(d: _Descent) -> _Descent:
        key, sub = jax.random.split(d.key)
        stop = is_stop(tree, d.node)
        action = selection_fn(sub, node_stats(tree, d.node, t_hat))
        if expansion != "prior":
            has, drawn = expansion_choice(jax.random.fold_in(sub, 1), tree, d.node, t_hat,
                                          expansion, c_tok)
            action = jnp.where(has, drawn, action)
        child = tree.children_index[d.node, action]
        new_edge = child == UNVISITED
        at_limit = d.depth + 1 >= max_depth
        leaf = jnp.where(stop, d.node, jnp.where(new_edge, NO_PARENT, child))
        going = ~stop & ~new_edge & ~at_limit
        return _Descent(
            node=jnp.where(going, child, d.node), depth=d.depth + 1, action=action,
            expand=~stop & new_edge, leaf=leaf, going=going, key=key)

    init = _Descent(
        node=jnp.int32(ROOT_INDEX), depth=jnp.int32(0), action=jnp.int32(0),
        expand=jnp.array(False), leaf=jnp.int32(ROOT_INDEX), going=jnp.array(True), key=key)
    d = jax.lax.while_loop(lambda d: d.going, body, init)
    return Selection(parent=d.node, action=d.action, expand=d.expand, leaf=d.leaf)


def simulate(keys: chex.PRNGKey, tree: Tree, selection_fn: SelectionFn, max_depth: int,
             t_hat: Optional[chex.Array] = None, expansion: str = "prior",
             c_tok: float = 1e-4) -> Selection:
    """Descends every tree from its root with `selection_fn`.

    Args:
      keys: [B] PRNG keys (one per tree; split once per level).
      tree: the batched Tree.
      selection_fn: (key, NodeStats of one node) -> int32 [] candidate.
      max_depth: D (static).
      t_hat: [B, N, K] T_hat of every node (NodeStats.t_hat); None: tree.costs.
      expansion, c_tok: how an untried child is chosen (SearchConfig; static).

    Returns:
      Selection, [B] each.
    """
    t_hat = tree.costs if t_hat is None else t_hat
    chex.assert_equal_shape([t_hat, tree.costs])
    return jax.vmap(functools.partial(_descend, selection_fn=selection_fn, max_depth=max_depth,
                                      expansion=expansion, c_tok=c_tok))(tree, t_hat, keys)


# -------------------------------------------------------------------------- 2. expand
def _expand_one(tree: Tree, parent, action, index, mask, *, model: EnvModel,
                use_policy: bool) -> Tree:
    """`expand` on ONE tree: the child of (parent, action) written at node `index`."""
    env, env_params = model.env, model.env_params
    pstate = jax.tree.map(lambda x: x[parent], tree.states)
    cands, _ = env.legal_actions(pstate, env_params)
    cstate, ts = env.step(pstate, cands[action], env_params)
    info = node_info(model, cstate, use_policy)
    done = jnp.asarray(ts.done, bool)

    # Writes go to an out-of-range index (dropped) where mask is False: in-place
    # scatters, O(1) per trial whatever the tree size.
    slot = jnp.where(mask, index, tree.num_nodes)
    edge = jnp.where(mask, parent, tree.num_nodes)

    def put(arr, val, *idx):
        return arr.at[idx].set(val, mode="drop")

    return tree.replace(
        raw_value=put(tree.raw_value, jnp.where(done, 0.0, info.value), slot),
        parents=put(tree.parents, parent, slot),
        action_from_parent=put(tree.action_from_parent, action, slot),
        depth=put(tree.depth, tree.depth[parent] + 1, slot),
        terminal=put(tree.terminal, done, slot),
        children_index=put(tree.children_index, index, edge, action),
        children_rewards=put(tree.children_rewards, jnp.asarray(ts.reward, jnp.float32), edge, action),
        prior_logp=put(tree.prior_logp, info.prior_logp, slot),
        legal=put(tree.legal, info.legal, slot),
        searchable=put(tree.searchable, info.searchable, slot),
        costs=put(tree.costs, info.costs, slot),
        states=jax.tree.map(lambda s, c: put(s, c, slot), tree.states, cstate),
    )


def expand(tree: Tree, model: EnvModel, parent: chex.Array, action: chex.Array,
           index: chex.Array, mask: chex.Array, use_policy: bool = True) -> Tree:
    """Steps the environment from node `parent`'s stored state with candidate `action` and
    stores the child at node `index` (where `mask`; elsewhere the tree is unchanged).

    Args:
      tree: the batched Tree.
      model: EnvModel.
      parent, action: [B] i32.
      index: [] i32, the node slot of the new child (trial s writes s + 1).
      mask: [B] bool, the trees that expand.
      use_policy: evaluate policy_fn at the child (static; else uniform prior, value 0).

    Returns:
      the Tree with the children written.
    """
    chex.assert_shape([parent, action, mask], (tree.batch_size,))
    return jax.vmap(functools.partial(_expand_one, model=model, use_policy=use_policy),
                    in_axes=(0, 0, 0, None, 0))(tree, parent, action, index, mask)


# ------------------------------------------------------------------- 3. evaluate_leaf
class _Play(NamedTuple):
    """lax.while_loop state of one continuation ([] unless noted)."""

    state: Any
    ret: chex.Array      # f32, rewards so far
    tokens: chex.Array   # f32, env tokens of every step
    actor: chex.Array    # f32, actor-scoring tokens
    calls: chex.Array    # i32, steps
    trace: Trace         # [L] the steps' ledger entries
    t: chex.Array        # i32
    done: chex.Array     # bool
    key: chex.PRNGKey


def continue_episode(model: EnvModel, config: SearchConfig, state: Any, key: chex.PRNGKey,
                     table: Optional[chex.Array]) -> Tuple[chex.Array, Cost, Trace]:
    """ONE continuation from `state` to the end of the episode (at most L = env.max_turns
    steps) by config.continuation: "actor" a ~ pi_old, "uniform" a ~ U(legal),
    "cost_weighted" P(a) ~ exp(-c_tok T_hat(s, a)) over the legal a (table: [P, K] or None,
    see state_t_hat).

    Returns (G = sum of rewards [] f32, Cost [] of every step (aux_tokens: env tokens,
    actor_tokens: per actor decision non-PAD obs + legal candidates' tokens), Trace [L]).
    """
    env, p = model.env, model.env_params
    horizon = int(env.max_turns)
    workflow = env.workflow(p) is not None

    def body(c: _Play) -> _Play:
        key, sub = jax.random.split(c.key)
        cands, legal = env.legal_actions(c.state, p)
        actor = jnp.float32(0.0)
        if config.continuation == "actor":
            logits, _ = model.policy_fn(c.state)
            obs = env.observe(c.state, p)
            actor = (jnp.sum(obs != PAD_ID)                                # x_t tokens
                     + jnp.sum(legal[:, None] & (cands != PAD_ID))).astype(jnp.float32)
        elif config.continuation == "uniform":
            logits = jnp.zeros(legal.shape, jnp.float32)
        else:
            logits = -config.c_tok * state_t_hat(model, table, c.state)     # log P ~ -c_tok T_hat
        a = sample_candidate(sub, logits, legal)
        cost = jnp.asarray(env.action_costs(c.state, p), jnp.float32)[a]
        decided = (jnp.asarray(env.workflow_node(c.state, p), jnp.int32) if workflow
                   else jnp.int32(0)) if config.continuation == "actor" else jnp.int32(-1)
        s, ts = env.step(c.state, cands[a], p)
        prefix = env.workflow_node(s, p) if workflow else jnp.int32(0)
        trace = Trace(c.trace.prefix.at[c.t].set(jnp.asarray(prefix, jnp.int32)),
                      c.trace.tokens.at[c.t].set(cost), c.trace.valid.at[c.t].set(True),
                      c.trace.decided.at[c.t].set(decided), c.trace.actor.at[c.t].set(actor))
        return _Play(s, c.ret + ts.reward, c.tokens + cost, c.actor + actor, c.calls + 1,
                     trace, c.t + 1, jnp.asarray(ts.done, bool), key)

    if config.rekey_rollouts:
        key, env_key = jax.random.split(key)
        state = rekey_state(state, env_key)
    empty = empty_trace(horizon)
    init = _Play(state, jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0), jnp.int32(0),
                 empty, jnp.int32(0), state_done(env, state, p), key)
    c = jax.lax.while_loop(lambda c: ~c.done & (c.t < horizon), body, init)
    return c.ret.astype(jnp.float32), Cost(c.tokens, c.calls, c.actor), c.trace


def rollout_leaf_value(tree: Tree, leaf, key, model: EnvModel, config: SearchConfig, table):
    """leaf_eval="rollout", ONE tree: mean return of config.num_leaf_rollouts
    continuations from the leaf's state -> (value [] f32, Cost [] summed, Trace [M * L])."""
    lstate = jax.tree.map(lambda x: x[leaf], tree.states)
    keys = jax.random.split(key, config.num_leaf_rollouts)
    g, cost, trace = jax.vmap(lambda k: continue_episode(model, config, lstate, k, table))(keys)
    return (jnp.mean(g), Cost(*(jnp.sum(x, 0) for x in cost)),
            jax.tree.map(lambda x: x.reshape(-1), trace))


def critic_leaf_value(tree: Tree, leaf, key, model: EnvModel, config: SearchConfig, table):
    """leaf_eval="critic", ONE tree: the critic value stored at the leaf (no cost)."""
    del key, model, config, table
    empty = empty_trace(0)
    return tree.raw_value[leaf], Cost(jnp.float32(0.0), jnp.int32(0), jnp.float32(0.0)), empty


LEAF_EVALS = {"rollout": rollout_leaf_value, "critic": critic_leaf_value}


def _evaluate_leaf_one(tree: Tree, leaf, key, table, *, model: EnvModel, config: SearchConfig):
    v, cost, trace = LEAF_EVALS[config.leaf_eval](tree, leaf, key, model, config, table)
    return jnp.where(tree.terminal[leaf], 0.0, v).astype(jnp.float32), cost, trace


def evaluate_leaf(keys: chex.PRNGKey, tree: Tree, leaf: chex.Array, model: EnvModel,
                  config: SearchConfig, table: Optional[chex.Array] = None
                  ) -> Tuple[chex.Array, Cost, Trace]:
    """Value of node `leaf` of every tree (0 if terminal), by config.leaf_eval.

    Args:
      keys: [B] PRNG keys; tree: the batched Tree; leaf: [B] i32; model: EnvModel;
      config: SearchConfig (static); table: [B, P, K] T_hat tables or None
      (remaining_costs).

    Returns:
      (value [B] f32, Cost [B] of the continuations' steps, Trace [B, E] of them).
    """
    chex.assert_shape(leaf, (tree.batch_size,))
    return jax.vmap(functools.partial(_evaluate_leaf_one, model=model, config=config)
                    )(tree, leaf, keys, table)


# ------------------------------------------------------------------------ 4. backward
def _backward_one(tree: Tree, leaf, value, active, max_depth: int) -> Tuple[Tree, BackupPath]:
    """`backward` on ONE tree. The path leaf -> root (at most D edges) is found with a
    scan over parents, then one scatter-add per statistic. Edge i (i = 0 deepest) goes from
    p_i through a_i; its return is G_i = sum_{j <= i} r_j + v  (gamma = 1)."""

    def up(node, _):
        valid = active & (node != ROOT_INDEX)
        p = jnp.where(valid, tree.parents[node], ROOT_INDEX)
        a = jnp.where(valid, tree.action_from_parent[node], 0)
        r = jnp.where(valid, tree.children_rewards[p, a], 0.0)
        return p, (p, a, r, valid)

    _, (ps, acts, rs, valid) = jax.lax.scan(up, leaf, None, length=max_depth)
    g = value + jnp.cumsum(rs)  # G_i = r_0 + ... + r_i + v
    inc = valid.astype(jnp.int32)
    g = jnp.where(valid, g, 0.0)
    tree = tree.replace(
        node_visits=tree.node_visits.at[leaf].add(active.astype(jnp.int32)).at[ps].add(inc),
        node_value_sum=tree.node_value_sum.at[leaf].add(jnp.where(active, value, 0.0)).at[ps].add(g),
        children_visits=tree.children_visits.at[ps, acts].add(inc),
        children_value_sum=tree.children_value_sum.at[ps, acts].add(g),
    )
    return tree, BackupPath(nodes=ps, actions=acts, valid=valid)


def backward(tree: Tree, leaf: chex.Array, value: chex.Array, active: chex.Array,
             max_depth: int) -> Tuple[Tree, BackupPath]:
    """Backs the leaf value up to the root: the leaf gets one visit and `value`; every
    ancestor p and the edge (p, a) taken from it get one visit and G = the rewards from p
    to the leaf + value. Nothing changes for an inactive tree.

    Args:
      tree: the batched Tree; leaf: [B] i32; value: [B] f32; active: [B] bool;
      max_depth: D (static), the longest path.

    Returns:
      (the updated Tree, BackupPath [B, D] of the edges updated).
    """
    chex.assert_shape([leaf, value, active], (tree.batch_size,))
    return jax.vmap(_backward_one, in_axes=(0, 0, 0, 0, None))(tree, leaf, value, active,
                                                                max_depth)


# ------------------------------------------------------------------- 5. cost accounting
def traversal_charge(tree: Tree, path: BackupPath, sel: Selection, expanded) -> Cost:
    """charge="traversal", ONE tree: the trial re-executes every edge of its path."""
    del sel, expanded
    tokens = jnp.sum(jnp.where(path.valid, tree.costs[path.nodes, path.actions], 0.0))
    return Cost(tokens, jnp.sum(path.valid.astype(jnp.int32)))


def expansion_charge(tree: Tree, path: BackupPath, sel: Selection, expanded) -> Cost:
    """charge="expansion", ONE tree: only the expanded edge is executed."""
    del path
    return Cost(jnp.where(expanded, tree.costs[sel.parent, sel.action], 0.0),
                expanded.astype(jnp.int32))


CHARGES = {"traversal": traversal_charge, "expansion": expansion_charge}


def _simulation_cost_one(tree, path, sel, expanded, active, leaf_cost, *, charge: str) -> Cost:
    steps = CHARGES[charge](tree, path, sel, expanded)
    return Cost(steps.aux_tokens + jnp.where(active, leaf_cost.aux_tokens, 0.0),
                steps.env_calls + jnp.where(active, leaf_cost.env_calls, 0),
                jnp.where(active, leaf_cost.actor_tokens, 0.0))


def _batched(cost: Cost, batch: int) -> Cost:
    return Cost(*(jnp.broadcast_to(jnp.asarray(x), (batch,)) for x in cost))


def simulation_cost(charge: str, tree: Tree, path: BackupPath, sel: Selection,
                    expanded: chex.Array, active: chex.Array, leaf_cost: Cost) -> Cost:
    """Cost [B] of one trial without a cache: its tree steps (by `charge`, see
    SearchConfig) plus its leaf evaluation's (counted only for an active tree).

    Args:
      charge: "traversal" or "expansion" (static).
      tree: the batched Tree; path: BackupPath [B, D]; sel: Selection [B];
      expanded: [B] bool; active: [B] bool; leaf_cost: Cost [B].
    """
    return jax.vmap(functools.partial(_simulation_cost_one, charge=charge)
                    )(tree, path, sel, expanded, active, _batched(leaf_cost, tree.batch_size))


def path_trace(model: EnvModel, tree: Tree, path: BackupPath) -> Trace:
    """Trace [B, D] of the tree edges of each trial's path: the prefix of each edge's
    child, the edge's realized cost (tree.costs), path.valid."""

    def one(tree, path):
        child = jnp.clip(tree.children_index[path.nodes, path.actions], 0)
        cstates = jax.tree.map(lambda x: x[child], tree.states)             # [D, ...]
        prefix = jax.vmap(lambda s: model.env.workflow_node(s, model.env_params))(cstates)
        d = path.valid.shape[0]
        return Trace(prefix.astype(jnp.int32), tree.costs[path.nodes, path.actions], path.valid,
                     jnp.full((d,), -1, jnp.int32), jnp.zeros((d,), jnp.float32))

    return jax.vmap(one)(tree, path)


def ledger_cost(cache: ExecutionCache, model: EnvModel, tree: Tree, path: BackupPath,
                leaf_trace: Trace, leaf_cost: Cost, qid: chex.Array,
                active: chex.Array) -> Tuple[ExecutionCache, Cost]:
    """Cost [B] of one trial step with an execution cache: the path's tree edges and the
    continuations' steps, each charged its realized tokens (and one env call) iff its
    prefix is uncached and first claimed in this step (cache.charge), then marked.

    Args: cache; model; tree: the batched Tree; path: BackupPath [B, D]; leaf_trace:
      Trace [B, E]; leaf_cost: Cost [B] (its actor_tokens are kept); qid: [B] i32;
      active: [B] bool.

    Returns: (the updated cache, Cost [B]).
    """
    trace = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=1),
                         path_trace(model, tree, path), leaf_trace)
    valid = trace.valid & active[:, None]
    cache, charged = cache_lib.charge(cache, qid, trace.prefix, valid)
    tokens = jnp.sum(jnp.where(charged, trace.tokens, 0.0), axis=1)         # t_env after reuse
    # Actor scoring at a prefix is charged once (the paper's VinePPO: "scoring is charged
    # once to the first requesting path"): the decisions' own namespace in the cache.
    scoring = valid & (trace.decided >= 0)
    cache, scored = cache_lib.charge(cache, qid, trace.decided, scoring, table="scored")
    actor = jnp.sum(jnp.where(scored, trace.actor, 0.0), axis=1)            # t_actor after reuse
    del leaf_cost
    return cache, Cost(tokens, jnp.sum(charged, axis=1).astype(jnp.int32), actor)


def add_costs(a: Cost, b: Cost) -> Cost:
    return Cost(*(x + y for x, y in zip(a, b)))


# --------------------------------------------------------------------------- search
def search(
    env,
    env_params: Any,
    root_states: Any,
    policy_fn: PolicyFn,
    key: chex.PRNGKey,
    selection_fn: SelectionFn,
    config: Any = None,
    *,
    cache: Optional[ExecutionCache] = None,
) -> SearchOutput:
    """Searches B trees rooted at `root_states` (see the module docstring).

    Args:
      env: an `asct_jax.envs.base.Environment` (static).
      env_params: its params (a pytree, may be traced).
      root_states: env-state pytree with a leading batch axis [B, ...].
      policy_fn: ONE state -> (logp [K] over candidates, normalised over the legal ones;
        value []): pi_old and the critic. It is vmapped / called inside loops here.
      key: PRNG key.
      selection_fn: (key, NodeStats of ONE node) -> int32 [] candidate, e.g.
        selection.make_selection("agentuct", config.asct.search); its bound
        hyperparameters may be traced.
      config: SearchConfig, dict or ConfigDict (static), e.g. paper_config("agentuct").
      cache: an ExecutionCache (cache.init_cache; workflow environments only) carried
        across searches, or None: every executed edge is charged.

    Returns:
      SearchOutput (q, visits, q_mask, prior_logp, ..., aux_tokens, env_calls, t_env,
      t_actor [B], cache: the updated cache).

    Jit it with env, policy_fn, selection_fn and config static, e.g.
      jax.jit(functools.partial(search, env, policy_fn=pi, selection_fn=sel, config=cfg)),
    or use make_search_fn.
    """
    config = make_search_config(config)
    if not callable(selection_fn):
        raise ValueError(f"selection_fn must be callable (key, NodeStats) -> action, got "
                         f"{selection_fn!r}; build one with selection.make_selection")
    leaves = jax.tree.leaves(root_states)
    if not leaves:
        raise ValueError("root_states must be a non-empty pytree with a leading batch axis")
    batch = leaves[0].shape[0]
    model = EnvModel(env, env_params, policy_fn)
    workflow = env.workflow(env_params)
    if cache is not None:
        if workflow is None:
            raise ValueError(f"cache: {env.name} is not a staged workflow (env.workflow is "
                             f"None); search it with cache=None")
        chex.assert_shape(cache.executed, (None, workflow.children.shape[0]))
    depth = config.depth(env)

    root = jax.vmap(functools.partial(node_info, model))(root_states)
    done = jax.vmap(lambda s: state_done(env, s, env_params))(root_states)
    chex.assert_shape([root.prior_logp, root.legal, root.searchable, root.costs],
                      (batch, env.num_actions))
    qid = (jax.vmap(lambda s: env.question_id(s, env_params))(root_states).astype(jnp.int32)
           if workflow is not None else jnp.zeros((batch,), jnp.int32))
    tree = init_tree(config.num_simulations + 1, root_states, root.prior_logp, root.value,
                     root.legal, root.searchable, root.costs, done)

    def body(sim, state: SearchState) -> SearchState:
        keys = jax.random.split(jax.random.fold_in(key, sim), batch)
        sel_keys, eval_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
        active = root_active(state.tree)  # a done root: nothing to search
        table, node_t_hat = remaining_costs(model, state.tree, qid, state.cache)
        sel = simulate(sel_keys, state.tree, selection_fn, depth, node_t_hat,
                       config.expansion, config.c_tok)
        expanded = sel.expand & active
        tree = expand(state.tree, model, sel.parent, sel.action, sim + 1, expanded,
                      config.node_policy)
        leaf = jnp.where(expanded, sim + 1, sel.leaf)
        value, leaf_cost, leaf_trace = evaluate_leaf(eval_keys, tree, leaf, model, config, table)
        tree, path = backward(tree, leaf, value, active, depth)
        if state.cache is None:
            new_cache = None
            cost = simulation_cost(config.charge, tree, path, sel, expanded, active, leaf_cost)
        else:
            new_cache, cost = ledger_cost(state.cache, model, tree, path, leaf_trace,
                                          leaf_cost, qid, active)
        return SearchState(tree, add_costs(state.cost, cost), new_cache)

    zeros = jnp.zeros((batch,), jnp.float32)
    init = SearchState(tree, Cost(zeros, jnp.zeros((batch,), jnp.int32), zeros), cache)
    tree, cost, cache = jax.lax.fori_loop(0, config.num_simulations, body, init)

    visits = tree.children_visits[:, ROOT_INDEX]
    q = tree.qvalues(jnp.full((batch,), ROOT_INDEX))
    root_n = tree.node_visits[:, ROOT_INDEX]
    return SearchOutput(
        q=q,
        visits=visits,
        q_mask=visits > 0,
        prior_logp=root.prior_logp,
        root_value=root.value,
        search_value=jnp.where(
            root_n > 0, tree.node_value_sum[:, ROOT_INDEX] / jnp.maximum(root_n, 1), 0.0
        ),
        legal=root.legal,
        searchable=root.searchable,
        aux_tokens=cost.aux_tokens + cost.actor_tokens,  # t_env + t_actor
        env_calls=cost.env_calls,
        t_env=cost.aux_tokens,
        t_actor=cost.actor_tokens,
        tree=tree,
        cache=cache,
    )


def make_search_fn(env, policy_fn: PolicyFn, selection_fn: SelectionFn,
                   config: Any = None) -> Callable:
    """jit-compiled `(env_params, root_states, key, cache=None, **hyperparameters) ->
    SearchOutput`.

    The keyword arguments (e.g. beta=, c_tok=) are traced and bound into `selection_fn`
    for that call (functools.partial(selection_fn, **hyperparameters)): a schedule does
    not recompile the search. cache: an ExecutionCache (a traced input) or None.
    """
    config = make_search_config(config)

    @jax.jit
    def fn(env_params, root_states, key, cache=None, **hyperparameters):
        sel = functools.partial(selection_fn, **hyperparameters) if hyperparameters else selection_fn
        return search(env, env_params, root_states, policy_fn, key, sel, config, cache=cache)

    return fn
