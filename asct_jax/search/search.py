"""Batched ASCT tree search over an environment's candidate actions (METHODS.md section 1).

One call searches B independent trees, one per root state, each with N = num_simulations
simulations, all under one jit (lax.fori_loop over simulations, vmap over trees,
lax.while_loop for descent and rollouts, lax.scan for the backup). One simulation:

  1. select: from the root, pick a candidate with the selection rule at each node, until
     an unexpanded edge, the depth limit D (config.max_depth edges) or a node that cannot be
     expanded (terminal, or no legal & restorable candidate) is reached;
  2. expand: step the environment from the parent's stored state with cands[k] and store
     the child (state, legal mask, costs, pi_old prior, critic value, done);
  3. evaluate the leaf: v = 0 if terminal, else the mean return of
     config.num_leaf_rollouts rollouts of pi_old to the end of the episode
     (leaf_eval="rollout") or the critic V(s_leaf) (leaf_eval="critic");
  4. back up: walking to the root, G <- r(parent, k) + G (gamma = 1), adding G to the
     edge and node statistics.

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
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional

import chex
import jax
import jax.numpy as jnp

from asct_jax.search import selection
from asct_jax.search.rollout_value import PolicyFn, mc_return, state_done
from asct_jax.search.tree import NO_PARENT, ROOT_INDEX, UNVISITED, Tree, init_tree

RULE_NAMES = ("uniform", "uct", "puct", "agentuct")
LEAF_EVALS = ("rollout", "critic")
CHARGES = ("traversal", "expansion")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Static search configuration (hashable: safe as a jit static argument).

    Attributes:
      num_simulations: simulations per tree (>= 1); the tree holds num_simulations + 1 nodes.
      max_depth: D, maximum number of edges from the root (>= 1).
      rule: selection rule, one of "uniform", "uct", "puct", "agentuct".
      c: exploration constant of uct / puct / agentuct.
      beta: AgentUCT cost weight (a schedule: pass `beta=` to `search`, traced).
      eps: the eps in sqrt(ln(N + 1) / (n + eps)).
      leaf_eval: "rollout" (pi_old to the end) or "critic" (the policy_fn value).
      num_leaf_rollouts: rollouts per leaf evaluation when leaf_eval == "rollout".
      unvisited_first: uct / agentuct take unvisited actions first (ordered by the prior).
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
    rule: str = "agentuct"
    c: float = 1.0
    beta: float = 1.0
    eps: float = 1e-6
    leaf_eval: str = "rollout"
    num_leaf_rollouts: int = 1
    unvisited_first: bool = True
    charge: str = "traversal"
    rekey_rollouts: bool = False

    def __post_init__(self):
        if not isinstance(self.num_simulations, int) or self.num_simulations < 1:
            raise ValueError(f"num_simulations must be an int >= 1, got {self.num_simulations!r}")
        if not isinstance(self.max_depth, int) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an int >= 1, got {self.max_depth!r}")
        if self.rule not in RULE_NAMES:
            raise ValueError(f"rule must be one of {RULE_NAMES}, got {self.rule!r}")
        if self.leaf_eval not in LEAF_EVALS:
            raise ValueError(f"leaf_eval must be one of {LEAF_EVALS}, got {self.leaf_eval!r}")
        if self.charge not in CHARGES:
            raise ValueError(f"charge must be one of {CHARGES}, got {self.charge!r}")
        if not isinstance(self.num_leaf_rollouts, int) or self.num_leaf_rollouts < 1:
            raise ValueError(f"num_leaf_rollouts must be an int >= 1, got {self.num_leaf_rollouts!r}")
        if not self.c >= 0:
            raise ValueError(f"c must be >= 0, got {self.c!r}")
        if not self.beta >= 0:
            raise ValueError(f"beta must be >= 0, got {self.beta!r}")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")


def make_search_config(config: Any = None, **overrides) -> SearchConfig:
    """SearchConfig from a SearchConfig, a dict or an ml_collections.ConfigDict (+ overrides).
    Unknown fields raise a one-line ValueError naming them."""
    if config is None:
        fields = {}
    elif isinstance(config, SearchConfig):
        fields = dataclasses.asdict(config)
    elif isinstance(config, Mapping) or hasattr(config, "to_dict"):
        fields = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    else:
        raise ValueError(f"config must be a SearchConfig, dict or ConfigDict, got {type(config)}")
    fields.update(overrides)
    known = {f.name for f in dataclasses.fields(SearchConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown SearchConfig fields {unknown}; allowed: {sorted(known)}")
    return SearchConfig(**fields)


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


def _node_info(env, env_params, policy_fn: PolicyFn, state):
    """(prior_logp [K], value [], legal [K], searchable [K], costs [K]) of ONE state."""
    _, legal = env.legal_actions(state, env_params)
    logp, value = policy_fn(state)
    chex.assert_shape(logp, (env.num_actions,))
    legal = jnp.asarray(legal, bool)
    searchable = legal & jnp.asarray(env.restorable(state, env_params), bool)
    costs = jnp.asarray(env.action_costs(state, env_params), jnp.float32)
    logp = jnp.where(legal, logp.astype(jnp.float32), -jnp.inf)
    return logp, jnp.asarray(value, jnp.float32).reshape(()), legal, searchable, costs


def _node_stats(tree: Tree, node) -> selection.NodeStats:
    """Statistics of one node of an UNBATCHED tree."""
    return selection.NodeStats(
        child_visits=tree.children_visits[node],
        child_value_sum=tree.children_value_sum[node],
        prior_logp=tree.prior_logp[node],
        mask=tree.searchable[node],
        costs=tree.costs[node],
        value=tree.raw_value[node],
    )


def _is_stop(tree: Tree, node) -> chex.Array:
    """A node below which nothing can be expanded: done, or no selectable candidate."""
    return tree.terminal[node] | ~jnp.any(tree.searchable[node])


def _select(tree: Tree, key, rule: Callable, rule_kwargs, max_depth: int):
    """Descends ONE tree. Returns (parent, action, expand, leaf):
    expand=True: create the child of (parent, action); else re-evaluate node `leaf`."""

    def cond(c):
        return c[5]

    def body(c):
        node, depth, _, _, _, _, key = c
        key, sub = jax.random.split(key)
        stop = _is_stop(tree, node)
        action = rule(sub, _node_stats(tree, node), **rule_kwargs)
        child = tree.children_index[node, action]
        new_edge = child == UNVISITED
        at_limit = depth + 1 >= max_depth
        expand = ~stop & new_edge
        leaf = jnp.where(stop, node, jnp.where(new_edge, NO_PARENT, child))
        going = ~stop & ~new_edge & ~at_limit
        nxt = jnp.where(going, child, node)
        return nxt, depth + 1, action, expand, leaf, going, key

    init = (
        jnp.int32(ROOT_INDEX), jnp.int32(0), jnp.int32(0), jnp.array(False),
        jnp.int32(ROOT_INDEX), jnp.array(True), key,
    )
    node, _, action, expand, leaf, _, _ = jax.lax.while_loop(cond, body, init)
    return node, action, expand, leaf


def _simulate_one(tree: Tree, key, sim, *, env, env_params, policy_fn, config, rule_kwargs):
    """One simulation on ONE (unbatched) tree -> (tree, aux_tokens [], env_calls [])."""
    sel_key, eval_key = jax.random.split(key)
    rule = selection.RULES[config.rule]
    active = ~_is_stop(tree, ROOT_INDEX)  # a done root: nothing to search

    # 1. Selection.
    parent, action, expand, leaf = _select(tree, sel_key, rule, rule_kwargs, config.max_depth)
    expand = expand & active

    # 2. Expansion: step the env from the parent's stored state with cands[action].
    new = sim + 1
    pstate = jax.tree.map(lambda x: x[parent], tree.states)
    cands, _ = env.legal_actions(pstate, env_params)
    cstate, ts = env.step(pstate, cands[action], env_params)
    logp, value, legal, searchable, costs = _node_info(env, env_params, policy_fn, cstate)
    done = jnp.asarray(ts.done, bool)

    # Writes go to an out-of-range index (dropped) when nothing is expanded: in-place
    # scatters, O(1) per simulation whatever the tree size.
    slot = jnp.where(expand, new, tree.num_nodes)
    edge = jnp.where(expand, parent, tree.num_nodes)

    def put(arr, val, *idx):
        return arr.at[idx].set(val, mode="drop")

    tree = tree.replace(
        raw_value=put(tree.raw_value, jnp.where(done, 0.0, value), slot),
        parents=put(tree.parents, parent, slot),
        action_from_parent=put(tree.action_from_parent, action, slot),
        depth=put(tree.depth, tree.depth[parent] + 1, slot),
        terminal=put(tree.terminal, done, slot),
        children_index=put(tree.children_index, new, edge, action),
        children_rewards=put(tree.children_rewards, jnp.asarray(ts.reward, jnp.float32), edge, action),
        prior_logp=put(tree.prior_logp, logp, slot),
        legal=put(tree.legal, legal, slot),
        searchable=put(tree.searchable, searchable, slot),
        costs=put(tree.costs, costs, slot),
        states=jax.tree.map(lambda s, c: put(s, c, slot), tree.states, cstate),
    )
    leaf = jnp.where(expand, new, leaf)

    # 3. Leaf evaluation.
    if config.leaf_eval == "rollout":
        lstate = jax.tree.map(lambda x: x[leaf], tree.states)
        v, _, r_tok, r_calls = mc_return(
            env, env_params, lstate, policy_fn, eval_key, config.num_leaf_rollouts,
            config.rekey_rollouts,
        )
        roll_aux = jnp.where(active, r_tok, 0.0)
        roll_calls = jnp.where(active, r_calls, 0)
    else:
        v = tree.raw_value[leaf]
        roll_aux, roll_calls = jnp.float32(0.0), jnp.int32(0)
    v = jnp.where(tree.terminal[leaf], 0.0, v).astype(jnp.float32)

    # 4. Backup along the path leaf -> root (at most D edges, found with a scan over
    # parents), then one scatter-add per statistic. Edge i (i = 0 deepest) goes from
    # p_i through a_i; its return is G_i = sum_{j <= i} r_j + v  (gamma = 1).
    def up(node, _):
        valid = active & (node != ROOT_INDEX)
        p = jnp.where(valid, tree.parents[node], ROOT_INDEX)
        a = jnp.where(valid, tree.action_from_parent[node], 0)
        r = jnp.where(valid, tree.children_rewards[p, a], 0.0)
        return p, (p, a, r, valid)

    _, (ps, acts, rs, valid) = jax.lax.scan(up, leaf, None, length=config.max_depth)
    g = v + jnp.cumsum(rs)  # G_i = r_0 + ... + r_i + v
    inc = valid.astype(jnp.int32)
    g = jnp.where(valid, g, 0.0)
    tree = tree.replace(
        node_visits=tree.node_visits.at[leaf].add(active.astype(jnp.int32)).at[ps].add(inc),
        node_value_sum=tree.node_value_sum.at[leaf].add(jnp.where(active, v, 0.0)).at[ps].add(g),
        children_visits=tree.children_visits.at[ps, acts].add(inc),
        children_value_sum=tree.children_value_sum.at[ps, acts].add(g),
    )
    # 5. Charges.
    if config.charge == "traversal":  # every simulation re-executes its whole path
        tree_aux = jnp.sum(jnp.where(valid, tree.costs[ps, acts], 0.0))
        tree_calls = jnp.sum(inc)
    else:  # only the expanded edge is executed
        tree_aux = jnp.where(expand, tree.costs[parent, action], 0.0)
        tree_calls = expand.astype(jnp.int32)
    return tree, tree_aux + roll_aux, tree_calls + roll_calls


def search(
    env,
    env_params: Any,
    root_states: Any,
    policy_fn: PolicyFn,
    key: chex.PRNGKey,
    config: Any = None,
    *,
    c: Optional[chex.Numeric] = None,
    beta: Optional[chex.Numeric] = None,
) -> SearchOutput:
    """Searches B trees rooted at `root_states` (see the module docstring).

    Args:
      env: an `asct_jax.envs.base.Environment` (static).
      env_params: its params (a pytree, may be traced).
      root_states: env-state pytree with a leading batch axis [B, ...].
      policy_fn: ONE state -> (logp [K] over candidates, normalised over the legal ones;
        value []): pi_old and the critic. It is vmapped / called inside loops here.
      key: PRNG key.
      config: SearchConfig, dict or ConfigDict (static).
      c, beta: optional traced overrides of config.c / config.beta (e.g. a beta schedule
        without recompiling).

    Returns:
      SearchOutput (q, visits, q_mask, prior_logp, ..., aux_tokens [B], env_calls [B]).

    Jit it with env, policy_fn and config static, e.g.
      jax.jit(functools.partial(search, env, policy_fn=pi, config=cfg)).
    """
    config = make_search_config(config)
    leaves = jax.tree.leaves(root_states)
    if not leaves:
        raise ValueError("root_states must be a non-empty pytree with a leading batch axis")
    batch = leaves[0].shape[0]
    k = env.num_actions

    logp, value, legal, searchable, costs = jax.vmap(
        functools.partial(_node_info, env, env_params, policy_fn)
    )(root_states)
    done = jax.vmap(lambda s: state_done(env, s, env_params))(root_states)
    chex.assert_shape([logp, legal, searchable, costs], (batch, k))
    tree = init_tree(
        config.num_simulations + 1, root_states, logp, value, legal, searchable, costs, done
    )
    rule_kwargs = dict(
        c=config.c if c is None else c,
        beta=config.beta if beta is None else beta,
        eps=config.eps,
    )
    if config.rule in ("uct", "agentuct"):
        rule_kwargs["unvisited_first"] = config.unvisited_first
    sim_fn = jax.vmap(
        functools.partial(
            _simulate_one, env=env, env_params=env_params, policy_fn=policy_fn,
            config=config, rule_kwargs=rule_kwargs,
        ),
        in_axes=(0, 0, None),
    )

    def body(sim, carry):
        tree, aux, calls = carry
        keys = jax.random.split(jax.random.fold_in(key, sim), batch)
        tree, d_aux, d_calls = sim_fn(tree, keys, sim)
        return tree, aux + d_aux, calls + d_calls

    init = (tree, jnp.zeros((batch,), jnp.float32), jnp.zeros((batch,), jnp.int32))
    tree, aux, calls = jax.lax.fori_loop(0, config.num_simulations, body, init)

    visits = tree.children_visits[:, ROOT_INDEX]
    q = tree.qvalues(jnp.full((batch,), ROOT_INDEX))
    root_n = tree.node_visits[:, ROOT_INDEX]
    return SearchOutput(
        q=q,
        visits=visits,
        q_mask=visits > 0,
        prior_logp=logp,
        root_value=value,
        search_value=jnp.where(
            root_n > 0, tree.node_value_sum[:, ROOT_INDEX] / jnp.maximum(root_n, 1), 0.0
        ),
        legal=legal,
        searchable=searchable,
        aux_tokens=aux,
        env_calls=calls,
        tree=tree,
    )


def make_search_fn(env, policy_fn: PolicyFn, config: Any = None) -> Callable:
    """jit-compiled `(env_params, root_states, key, beta=None) -> SearchOutput`."""
    config = make_search_config(config)

    @jax.jit
    def fn(env_params, root_states, key, beta=None):
        return search(env, env_params, root_states, policy_fn, key, config, beta=beta)

    return fn
