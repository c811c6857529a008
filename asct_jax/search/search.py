"""Batched ASCT tree search over an environment's candidate actions (docs/methods.md, ASCT > Search).

One call searches B independent trees, one per root state (an actor-visited state s),
each with N = config.num_simulations trials, all under one jit (lax.fori_loop over
trials, vmap over trees, lax.while_loop for descent and continuations, lax.scan for the
backup). The loop is split the mctx way and takes its rules as callables (SearchRules,
their hyperparameters bound with functools.partial: search.methods.paper_rules). One
trial (the body of `search`'s loop) is:

  0. `cache.remaining_costs`: T_hat(v, a) of every tree node from the execution cache
     (staged workflows, search.workflow) or env.action_costs (other environments);
  1. `simulate`: from the root, pick a candidate at each node until an untried edge, the
     depth limit D (config.max_depth edges; None: env.max_turns, i.e. none) or a node that
     cannot be expanded (terminal, or no legal & restorable candidate) is reached. At a
     node with untried children rules.expansion picks one (None: rules.selection does);
     elsewhere rules.selection decides;
  2. `expand`: step the environment from the parent's stored state with cands[k] and store
     the child (state, legal mask, costs, prior, critic value, done);
  3. `continuation.evaluate_leaf`: v = 0 if terminal, else the mean return of
     config.num_leaf_rollouts continuations to the end of the episode, each step drawn
     by rules.continuation;
  4. `backward`: walking to the root, G <- r(parent, k) + G (gamma = 1), adding G to the
     edge and node statistics; with a continuation to the end G at the root is the
     trial's terminal utility U (the sum of rewards from s);
  5. `accounting.trial_cost`: every executed edge without a cache, only the uncached ones
     with one (env_tokens and their categories, actor_tokens in every unit, env_calls;
     search.accounting).

Q(s_root, a) = mean backed-up return of the trials through a. An action the search never
tried has no estimate (q_mask False, q = 0).

Notes.
* Stochastic environments: each edge's transition (next state, reward) is sampled once,
  at expansion, and kept; later trials through the edge reuse it (as mctx does with a
  model). Q(s, a) of one tree is therefore conditional on that sampled outcome; it is
  unbiased on average over trees / episodes. Continuations share the stored state's own
  environment key (see search.rollout_value).
* policy_fn is called once per root (its prior is returned as prior_logp); with
  config.node_policy also once per expansion (the new node's prior and critic); an actor
  continuation calls it at each of its steps.
* T_hat uses the cache as it was at the start of the trial step.
* Node slots: trial s writes slot s + 1 only if it expands; an unused slot keeps
  its initial values (visits 0, no parent).
* PRNG keys: trial s uses split(fold_in(key, s), B)[b] for tree b, split again into
  (selection key, leaf-evaluation key); an expansion rule draws with fold_in(its
  selection key, 1).
* The stage functions below work on the batched Tree ([B, ...]) and vmap a one-tree
  kernel; they are pure and jit-able.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.play import state_done
from asct_jax.search import accounting
from asct_jax.search.cache import ExecutionCache, remaining_costs
from asct_jax.search.continuation import evaluate_leaf
from asct_jax.search.tree import NO_PARENT, ROOT_INDEX, UNVISITED, Tree, init_tree
from asct_jax.search.scoring import ACTOR_UNITS, ChatLengths
from asct_jax.search.types import (BackupPath, EnvModel, ExpansionFn, NodeInfo, NodeStats,
                                   PolicyFn, SearchConfig, SearchOutput, SearchRules,
                                   SearchState, Selection, SelectionFn, zero_cost)
from asct_jax.search.workflow import workflow_of


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
    """What a rule sees of node `node` of ONE (unbatched) tree; t_hat: [N, K] T_hat of
    every node (None: NodeStats.t_hat None)."""
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


def _descend(tree: Tree, t_hat, key: chex.PRNGKey, selection_fn: SelectionFn,
             expansion_fn: Optional[ExpansionFn], max_depth: int) -> Selection:
    """`simulate` on ONE (unbatched) tree; returns a Selection of [] fields."""

    def body(d: _Descent) -> _Descent:
        key, sub = jax.random.split(d.key)
        stop = is_stop(tree, d.node)
        stats = node_stats(tree, d.node, t_hat)
        action = selection_fn(sub, stats)
        if expansion_fn is not None:
            has, drawn = expansion_fn(jax.random.fold_in(sub, 1), stats)
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
             t_hat: Optional[chex.Array] = None,
             expansion_fn: Optional[ExpansionFn] = None) -> Selection:
    """Descends every tree from its root with `selection_fn` (and `expansion_fn` at nodes
    with untried children, when given).

    Args:
      keys: [B] PRNG keys (one per tree; split once per level).
      tree: the batched Tree.
      selection_fn: (key, NodeStats of one node) -> int32 [] candidate.
      max_depth: D (static).
      t_hat: [B, N, K] T_hat of every node (NodeStats.t_hat); None: tree.costs.
      expansion_fn: (key, NodeStats) -> (any untried [] bool, drawn [] i32), or None.

    Returns:
      Selection, [B] each.
    """
    t_hat = tree.costs if t_hat is None else t_hat
    chex.assert_equal_shape([t_hat, tree.costs])
    return jax.vmap(functools.partial(_descend, selection_fn=selection_fn,
                                      expansion_fn=expansion_fn, max_depth=max_depth)
                    )(tree, t_hat, keys)


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


# --------------------------------------------------------------------------- search
def search(
    env,
    env_params: Any,
    root_states: Any,
    policy_fn: PolicyFn,
    key: chex.PRNGKey,
    rules: SearchRules,
    config: SearchConfig,
    *,
    cache: Optional[ExecutionCache] = None,
    chat: Optional[ChatLengths] = None,
) -> SearchOutput:
    """Searches B trees rooted at `root_states` (see the module docstring).

    Args:
      env: an `asct_jax.envs.base.Environment` (static).
      env_params: its params (a pytree, may be traced).
      root_states: env-state pytree with a leading batch axis [B, ...].
      policy_fn: ONE state -> (logp [K] over candidates, normalised over the legal ones;
        value []): pi_old and the critic. It is vmapped / called inside loops here.
      key: PRNG key.
      rules: SearchRules (static): the selection, expansion and continuation callables,
        e.g. search.methods.paper_rules("agentuct", c_exp=1.4, c_tok=1e-4); bound
        hyperparameters may be traced.
      config: SearchConfig (static).
      cache: an ExecutionCache (cache.init_cache; staged workflows only) carried
        across searches, or None: every executed edge is charged.
      chat: the chat-prompt length tables of the actor-scoring ledger
        (search.scoring.chat_lengths; static), or None: the chat units are 0 (then
        config.actor_unit must be "words").

    Returns:
      SearchOutput (q, visits, q_mask, prior_logp, ..., env_tokens, actor_tokens,
      aux_tokens, env_calls [B], cache: the updated cache).

    Jit it with env, policy_fn, rules and config static, e.g.
      jax.jit(functools.partial(search, env, policy_fn=pi, rules=rules, config=cfg)).
    """
    if not isinstance(config, SearchConfig):
        raise ValueError(f"config must be a SearchConfig, got {type(config)}")
    if not isinstance(rules, SearchRules) or not callable(rules.selection):
        raise ValueError(f"rules must be SearchRules of callables (search.methods.paper_rules), "
                         f"got {rules!r}")
    if config.actor_unit != "words" and chat is None:
        raise ValueError(f"actor_unit {config.actor_unit!r} needs the chat tables (chat=): "
                         "search.scoring.chat_lengths(env)")
    leaves = jax.tree.leaves(root_states)
    if not leaves:
        raise ValueError("root_states must be a non-empty pytree with a leading batch axis")
    batch = leaves[0].shape[0]
    model = EnvModel(env, env_params, policy_fn, chat)
    workflow = workflow_of(env, env_params)
    if cache is not None:
        if workflow is None:
            raise ValueError(f"cache: {env.name} is not a staged workflow (search.workflow); "
                             f"search it with cache=None")
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
        sel = simulate(sel_keys, state.tree, rules.selection, depth, node_t_hat,
                       rules.expansion)
        expanded = sel.expand & active
        tree = expand(state.tree, model, sel.parent, sel.action, sim + 1, expanded,
                      config.node_policy)
        leaf = jnp.where(expanded, sim + 1, sel.leaf)
        value, leaf_cost, leaf_trace = evaluate_leaf(eval_keys, tree, leaf, model,
                                                     rules.continuation,
                                                     config.num_leaf_rollouts, table)
        tree, path = backward(tree, leaf, value, active, depth)
        new_cache, cost = accounting.trial_cost(state.cache, model, tree, path, leaf_cost,
                                                leaf_trace, qid, active)
        return SearchState(tree, accounting.add_costs(state.cost, cost), new_cache)

    init = SearchState(tree, zero_cost((batch,), len(env.cost_parts)), cache)
    tree, cost, cache = jax.lax.fori_loop(0, config.num_simulations, body, init)

    actor = cost.actor_tokens[:, ACTOR_UNITS.index(config.actor_unit)]   # t_actor in its unit
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
        env_tokens=cost.env_tokens,
        actor_tokens=actor,
        aux_tokens=cost.env_tokens + actor,  # T_aux = t_env + t_actor
        env_calls=cost.env_calls,
        actor_units=cost.actor_tokens,
        env_parts=cost.env_parts,
        actor_decisions=cost.actor_decisions,
        tree=tree,
        cache=cache,
    )
