"""Batched ASCT tree search over an environment's candidate actions (docs/methods.md, ASCT > Search).

One call searches B independent trees, one per root state, each with N = num_simulations
simulations, all under one jit (lax.fori_loop over simulations, vmap over trees,
lax.while_loop for descent and rollouts, lax.scan for the backup). The loop is split the
mctx way; one simulation (the body of `search`'s loop) is:

  1. `simulate`: from the root, pick a candidate with the selection function at each node,
     until an unexpanded edge, the depth limit D (config.max_depth edges) or a node that
     cannot be expanded (terminal, or no legal & restorable candidate) is reached;
  2. `expand`: step the environment from the parent's stored state with cands[k] and store
     the child (state, legal mask, costs, pi_old prior, critic value, done);
  3. `evaluate_leaf`: v = 0 if terminal, else the mean return of
     config.num_leaf_rollouts rollouts of pi_old to the end of the episode
     (leaf_eval="rollout") or the critic V(s_leaf) (leaf_eval="critic");
  4. `backward`: walking to the root, G <- r(parent, k) + G (gamma = 1), adding G to the
     edge and node statistics;
  5. `simulation_cost`: the auxiliary tokens and environment calls the simulation spent.

The selection function is passed in: `(key, node: NodeStats) -> int32 []`, e.g.
`functools.partial(selection.agentuct, c=1.0, beta=beta)` or
`selection.make_selection("agentuct", config.asct.search, beta=beta)`.

Q(s_root, a) = mean backed-up return of the simulations through a: the rewards along the
path from the root plus the leaf value (undiscounted, counted from the root). An action
the search never tried has no estimate (q_mask False, q = 0).

Auxiliary tokens: every action executed inside the search is charged its token cost
(env.action_costs): the tree steps (config.charge: every edge of every simulation's path,
"traversal", or only the expanded edges, "expansion") and every step of every leaf rollout.
env_calls are counted the same way.

Notes.
* Stochastic environments: each edge's transition (next state, reward) is sampled once,
  at expansion, and kept; later simulations through the edge reuse it (as mctx does with a
  model). Q(s, a) of one tree is therefore conditional on that sampled outcome; it is
  unbiased on average over trees / episodes. Leaf rollouts share the stored state's own
  environment key unless config.rekey_rollouts (see rollout_value).
* policy_fn is called once per root and once per expansion (prior and critic of the new
  node) and once per rollout step; those forward passes are not counted as aux tokens.
* Node slots: simulation s writes slot s + 1 only if it expands; an unused slot keeps
  its initial values (visits 0, no parent).
* PRNG keys: simulation s uses split(fold_in(key, s), B)[b] for tree b, split again into
  (selection key, leaf-evaluation key).
* The stage functions below (simulate, expand, evaluate_leaf, backward, simulation_cost)
  work on the batched Tree ([B, ...]) and vmap a one-tree kernel; they are pure and jit-able.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, NamedTuple, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.search import selection
from asct_jax.search.rollout_value import PolicyFn, mc_return, state_done
from asct_jax.search.selection import NodeStats, SelectionFn
from asct_jax.search.tree import NO_PARENT, ROOT_INDEX, UNVISITED, Tree, init_tree


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Static search configuration (hashable: safe as a jit static argument).

    The selection rule and its hyperparameters (c, beta, eps, unvisited_first) are not
    here: they are bound in the selection function passed to `search`
    (selection.make_selection).

    Attributes:
      num_simulations: simulations per tree (>= 1); the tree holds num_simulations + 1 nodes.
      max_depth: D, maximum number of edges from the root (>= 1).
      leaf_eval: "rollout" (pi_old to the end) or "critic" (the policy_fn value).
      num_leaf_rollouts: rollouts per leaf evaluation when leaf_eval == "rollout".
      charge: how tree steps are charged (aux_tokens and env_calls). "traversal" (the
        paper's accounting): every simulation pays every edge on its path, as a search
        that re-executes the workflow from the root (an LLM workflow, or an external
        environment recovered by replaying the prefix) would. "expansion": only the edge
        it expands, which is what this implementation steps (states are kept).
        Leaf rollouts are always charged in full.
      rekey_rollouts: leaf rollouts draw fresh environment randomness (state.key) instead
        of the stored state's own (see rollout_value's docstring).
    """

    num_simulations: int = 16
    max_depth: int = 3
    leaf_eval: str = "rollout"
    num_leaf_rollouts: int = 1
    charge: str = "traversal"
    rekey_rollouts: bool = False

    def __post_init__(self):
        if not isinstance(self.num_simulations, int) or self.num_simulations < 1:
            raise ValueError(f"num_simulations must be an int >= 1, got {self.num_simulations!r}")
        if not isinstance(self.max_depth, int) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an int >= 1, got {self.max_depth!r}")
        if self.leaf_eval not in LEAF_EVALS:
            raise ValueError(f"leaf_eval must be one of {tuple(LEAF_EVALS)}, got {self.leaf_eval!r}")
        if self.charge not in CHARGES:
            raise ValueError(f"charge must be one of {tuple(CHARGES)}, got {self.charge!r}")
        if not isinstance(self.num_leaf_rollouts, int) or self.num_leaf_rollouts < 1:
            raise ValueError(f"num_leaf_rollouts must be an int >= 1, got {self.num_leaf_rollouts!r}")


def make_search_config(config: Any = None, **overrides) -> SearchConfig:
    """SearchConfig from a SearchConfig, a dict or an ml_collections.ConfigDict (+ overrides).

    A dict / ConfigDict may also hold the selection hyperparameters
    (selection.HYPERPARAMS: what `asct.search` holds); they are skipped here (read them with
    selection.make_selection). Any other unknown field raises a one-line ValueError naming it.
    """
    if config is None:
        fields = {}
    elif isinstance(config, SearchConfig):
        fields = dataclasses.asdict(config)
    elif isinstance(config, Mapping) or hasattr(config, "to_dict"):
        fields = dict(config.to_dict() if hasattr(config, "to_dict") else config)
        fields = {k: v for k, v in fields.items() if k not in selection.HYPERPARAMS}
    else:
        raise ValueError(f"config must be a SearchConfig, dict or ConfigDict, got {type(config)}")
    fields.update(overrides)
    known = {f.name for f in dataclasses.fields(SearchConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"unknown SearchConfig fields {unknown}; allowed: {sorted(known)} (the selection "
            f"rule and {list(selection.HYPERPARAMS)} go to selection.make_selection)")
    return SearchConfig(**fields)


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
    """What executing actions inside the search cost: aux_tokens f32, env_calls i32, both
    of the same shape ([] for one simulation of one tree, [B] batched)."""

    aux_tokens: chex.Array
    env_calls: chex.Array


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


class SearchState(NamedTuple):
    """State of `search`'s loop over simulations: the trees and the cost so far ([B])."""

    tree: Tree
    cost: Cost


@chex.dataclass(frozen=True)
class SearchOutput:
    """What `search` returns (B trees, K candidates).

    Attributes:
      q: [B, K] f32, Q(s, a): mean backed-up return through root action a (0 if unvisited).
      visits: [B, K] i32, simulations through each root action (sum = simulations run).
      q_mask: [B, K] bool, visits > 0: the actions with an estimate.
      prior_logp: [B, K] f32, log pi_old(a|s) at the root (-inf where illegal).
      root_value: [B] f32, the critic V(s) at the root (policy_fn's value).
      search_value: [B] f32, mean backed-up return of all simulations from the root.
      legal: [B, K] bool, legal root candidates.
      searchable: [B, K] bool, legal and restorable root candidates.
      aux_tokens: [B] f32, token cost of every action executed inside the search.
      env_calls: [B] i32, environment steps taken inside the search.
      tree: the final Tree.
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
    tree: Tree


# ------------------------------------------------------------------- one-node helpers
def node_info(model: EnvModel, state: Any) -> NodeInfo:
    """NodeInfo of ONE state (no batch axis)."""
    env, env_params = model.env, model.env_params
    _, legal = env.legal_actions(state, env_params)
    logp, value = model.policy_fn(state)
    chex.assert_shape(logp, (env.num_actions,))
    legal = jnp.asarray(legal, bool)
    searchable = legal & jnp.asarray(env.restorable(state, env_params), bool)
    costs = jnp.asarray(env.action_costs(state, env_params), jnp.float32)
    logp = jnp.where(legal, logp.astype(jnp.float32), -jnp.inf)
    return NodeInfo(logp, jnp.asarray(value, jnp.float32).reshape(()), legal, searchable, costs)


def node_stats(tree: Tree, node: chex.Array) -> NodeStats:
    """What a selection function sees of node `node` of ONE (unbatched) tree."""
    return NodeStats(
        child_visits=tree.children_visits[node],
        child_value_sum=tree.children_value_sum[node],
        prior_logp=tree.prior_logp[node],
        mask=tree.searchable[node],
        costs=tree.costs[node],
        value=tree.raw_value[node],
    )


def is_stop(tree: Tree, node: chex.Array) -> chex.Array:
    """[] bool, for ONE tree: nothing can be expanded below `node` (done, or no
    selectable candidate)."""
    return tree.terminal[node] | ~jnp.any(tree.searchable[node])


def root_active(tree: Tree) -> chex.Array:
    """[B] bool: the trees whose root can be searched (a done root is not)."""
    return ~jax.vmap(is_stop, in_axes=(0, None))(tree, ROOT_INDEX)


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


def _descend(tree: Tree, key: chex.PRNGKey, selection_fn: SelectionFn,
             max_depth: int) -> Selection:
    """`simulate` on ONE (unbatched) tree; returns a Selection of [] fields."""

    def body(d: _Descent) -> _Descent:
        key, sub = jax.random.split(d.key)
        stop = is_stop(tree, d.node)
        action = selection_fn(sub, node_stats(tree, d.node))
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


def simulate(keys: chex.PRNGKey, tree: Tree, selection_fn: SelectionFn,
             max_depth: int) -> Selection:
    """Descends every tree from its root with `selection_fn`.

    Args:
      keys: [B] PRNG keys (one per tree; split once per level).
      tree: the batched Tree.
      selection_fn: (key, NodeStats of one node) -> int32 [] candidate.
      max_depth: D (static).

    Returns:
      Selection, [B] each.
    """
    return jax.vmap(functools.partial(_descend, selection_fn=selection_fn, max_depth=max_depth)
                    )(tree, keys)


# -------------------------------------------------------------------------- 2. expand
def _expand_one(tree: Tree, parent, action, index, mask, *, model: EnvModel) -> Tree:
    """`expand` on ONE tree: the child of (parent, action) written at node `index`."""
    env, env_params = model.env, model.env_params
    pstate = jax.tree.map(lambda x: x[parent], tree.states)
    cands, _ = env.legal_actions(pstate, env_params)
    cstate, ts = env.step(pstate, cands[action], env_params)
    info = node_info(model, cstate)
    done = jnp.asarray(ts.done, bool)

    # Writes go to an out-of-range index (dropped) where mask is False: in-place
    # scatters, O(1) per simulation whatever the tree size.
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
           index: chex.Array, mask: chex.Array) -> Tree:
    """Steps the environment from node `parent`'s stored state with candidate `action` and
    stores the child at node `index` (where `mask`; elsewhere the tree is unchanged).

    Args:
      tree: the batched Tree.
      model: EnvModel.
      parent, action: [B] i32.
      index: [] i32, the node slot of the new child (simulation s writes s + 1).
      mask: [B] bool, the trees that expand.

    Returns:
      the Tree with the children written.
    """
    chex.assert_shape([parent, action, mask], (tree.batch_size,))
    return jax.vmap(functools.partial(_expand_one, model=model), in_axes=(0, 0, 0, None, 0)
                    )(tree, parent, action, index, mask)


# ------------------------------------------------------------------- 3. evaluate_leaf
def rollout_leaf_value(tree: Tree, leaf, key, model: EnvModel, config: SearchConfig):
    """leaf_eval="rollout", ONE tree: mean return of config.num_leaf_rollouts pi_old
    rollouts from the leaf's state -> (value [] f32, Cost of the rollouts)."""
    lstate = jax.tree.map(lambda x: x[leaf], tree.states)
    v, _, tokens, calls = mc_return(model.env, model.env_params, lstate, model.policy_fn, key,
                                    config.num_leaf_rollouts, config.rekey_rollouts)
    return v, Cost(tokens, calls)


def critic_leaf_value(tree: Tree, leaf, key, model: EnvModel, config: SearchConfig):
    """leaf_eval="critic", ONE tree: the critic value stored at the leaf (no cost)."""
    del key, model, config
    return tree.raw_value[leaf], Cost(jnp.float32(0.0), jnp.int32(0))


LEAF_EVALS = {"rollout": rollout_leaf_value, "critic": critic_leaf_value}


def _evaluate_leaf_one(tree: Tree, leaf, key, *, model: EnvModel, config: SearchConfig):
    v, cost = LEAF_EVALS[config.leaf_eval](tree, leaf, key, model, config)
    return jnp.where(tree.terminal[leaf], 0.0, v).astype(jnp.float32), cost


def evaluate_leaf(keys: chex.PRNGKey, tree: Tree, leaf: chex.Array, model: EnvModel,
                  config: SearchConfig) -> Tuple[chex.Array, Cost]:
    """Value of node `leaf` of every tree (0 if terminal), by config.leaf_eval.

    Args:
      keys: [B] PRNG keys; tree: the batched Tree; leaf: [B] i32; model: EnvModel;
      config: SearchConfig (static).

    Returns:
      (value [B] f32, Cost [B] of the leaf evaluation: its rollouts' tokens and steps).
    """
    chex.assert_shape(leaf, (tree.batch_size,))
    return jax.vmap(functools.partial(_evaluate_leaf_one, model=model, config=config)
                    )(tree, leaf, keys)


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
    """charge="traversal", ONE tree: the simulation re-executes every edge of its path."""
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
                steps.env_calls + jnp.where(active, leaf_cost.env_calls, 0))


def simulation_cost(charge: str, tree: Tree, path: BackupPath, sel: Selection,
                    expanded: chex.Array, active: chex.Array, leaf_cost: Cost) -> Cost:
    """Cost [B] of one simulation: its tree steps (by `charge`, see SearchConfig) plus
    its leaf evaluation's (counted only for an active tree).

    Args:
      charge: "traversal" or "expansion" (static).
      tree: the batched Tree; path: BackupPath [B, D]; sel: Selection [B];
      expanded: [B] bool; active: [B] bool; leaf_cost: Cost [B].
    """
    return jax.vmap(functools.partial(_simulation_cost_one, charge=charge)
                    )(tree, path, sel, expanded, active, leaf_cost)


def add_costs(a: Cost, b: Cost) -> Cost:
    return Cost(a.aux_tokens + b.aux_tokens, a.env_calls + b.env_calls)


# --------------------------------------------------------------------------- search
def search(
    env,
    env_params: Any,
    root_states: Any,
    policy_fn: PolicyFn,
    key: chex.PRNGKey,
    selection_fn: SelectionFn,
    config: Any = None,
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
        functools.partial(selection.agentuct, c=1.0, beta=beta) or
        selection.make_selection("agentuct", config.asct.search, beta=beta); its bound
        hyperparameters may be traced.
      config: SearchConfig, dict or ConfigDict (static).

    Returns:
      SearchOutput (q, visits, q_mask, prior_logp, ..., aux_tokens [B], env_calls [B]).

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

    root = jax.vmap(functools.partial(node_info, model))(root_states)
    done = jax.vmap(lambda s: state_done(env, s, env_params))(root_states)
    chex.assert_shape([root.prior_logp, root.legal, root.searchable, root.costs],
                      (batch, env.num_actions))
    tree = init_tree(config.num_simulations + 1, root_states, root.prior_logp, root.value,
                     root.legal, root.searchable, root.costs, done)

    def body(sim, state: SearchState) -> SearchState:
        keys = jax.random.split(jax.random.fold_in(key, sim), batch)
        sel_keys, eval_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
        active = root_active(state.tree)  # a done root: nothing to search
        sel = simulate(sel_keys, state.tree, selection_fn, config.max_depth)
        expanded = sel.expand & active
        tree = expand(state.tree, model, sel.parent, sel.action, sim + 1, expanded)
        leaf = jnp.where(expanded, sim + 1, sel.leaf)
        value, leaf_cost = evaluate_leaf(eval_keys, tree, leaf, model, config)
        tree, path = backward(tree, leaf, value, active, config.max_depth)
        cost = simulation_cost(config.charge, tree, path, sel, expanded, active, leaf_cost)
        return SearchState(tree, add_costs(state.cost, cost))

    init = SearchState(tree, Cost(jnp.zeros((batch,), jnp.float32), jnp.zeros((batch,), jnp.int32)))
    tree, cost = jax.lax.fori_loop(0, config.num_simulations, body, init)

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
        aux_tokens=cost.aux_tokens,
        env_calls=cost.env_calls,
        tree=tree,
    )


def make_search_fn(env, policy_fn: PolicyFn, selection_fn: SelectionFn,
                   config: Any = None) -> Callable:
    """jit-compiled `(env_params, root_states, key, **hyperparameters) -> SearchOutput`.

    The keyword arguments (e.g. beta=) are traced and bound into `selection_fn` for that
    call (functools.partial(selection_fn, **hyperparameters)): a beta schedule does not
    recompile the search.
    """
    config = make_search_config(config)

    @jax.jit
    def fn(env_params, root_states, key, **hyperparameters):
        sel = functools.partial(selection_fn, **hyperparameters) if hyperparameters else selection_fn
        return search(env, env_params, root_states, policy_fn, key, sel, config)

    return fn
