"""The batched search tree: one chex dataclass of preallocated [B, N] / [B, N, K] arrays.

Layout follows mctx: N = num_simulations + 1 preallocated nodes per tree, node 0 is the
root, simulation s (0-based) writes the node it expands at index s + 1 (a simulation that
expands nothing leaves that slot unused, visits 0). Edges are addressed by (node, k), k the
candidate index in [0, K).

Statistics (undiscounted, gamma = 1; a "return from n" is the sum of rewards after n on the
simulation's path plus the leaf value):
  node_visits[n]          number of simulations whose path contains n (the root: all of
                          them; an expanded node: 1 for its expansion + passes through it).
  node_value_sum[n]       sum over those simulations of the return from n.
  children_visits[n, k]   number of simulations that took k at n.
  children_value_sum[n,k] sum over those of r(n, k) + return from the child.
So Qbar(n, k) = children_value_sum / children_visits, and for every expanded node below
the depth limit: node_visits = 1 + sum_k children_visits.
"""
from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

ROOT_INDEX = 0
NO_PARENT = -1
UNVISITED = -1


@chex.dataclass(frozen=True)
class Tree:
    """Batched search trees. B trees, N nodes each, K candidate actions.

    Attributes:
      node_visits: [B, N] int32.
      node_value_sum: [B, N] float32, sum of returns from the node.
      raw_value: [B, N] float32, the critic V(s) of the node (0 if terminal).
      parents: [B, N] int32, parent node index (NO_PARENT for the root / unused).
      action_from_parent: [B, N] int32 (NO_PARENT for the root / unused).
      depth: [B, N] int32, number of edges from the root.
      terminal: [B, N] bool, the node's state is done.
      children_index: [B, N, K] int32, child node index or UNVISITED.
      children_visits: [B, N, K] int32.
      children_value_sum: [B, N, K] float32, sum of r(n, k) + return from the child.
      children_rewards: [B, N, K] float32, r(n, k) observed at expansion.
      prior_logp: [B, N, K] float32, log pi_old(k | s_n) (-inf where illegal).
      legal: [B, N, K] bool, legal candidates of the node's state.
      searchable: [B, N, K] bool, legal & restorable: what selection may pick.
      costs: [B, N, K] float32, auxiliary-token cost of each candidate.
      states: env-state pytree, every leaf with leading [B, N].
    """

    node_visits: chex.Array
    node_value_sum: chex.Array
    raw_value: chex.Array
    parents: chex.Array
    action_from_parent: chex.Array
    depth: chex.Array
    terminal: chex.Array
    children_index: chex.Array
    children_visits: chex.Array
    children_value_sum: chex.Array
    children_rewards: chex.Array
    prior_logp: chex.Array
    legal: chex.Array
    searchable: chex.Array
    costs: chex.Array
    states: Any

    @property
    def num_actions(self) -> int:
        return self.children_index.shape[-1]

    @property
    def num_nodes(self) -> int:
        return self.children_index.shape[-2]

    @property
    def batch_size(self) -> int:
        return self.children_index.shape[0]

    def qvalues(self, index: chex.Array) -> chex.Array:
        """Qbar of node `index` [B] -> [B, K] (0 where unvisited)."""
        b = jnp.arange(self.batch_size)
        n = self.children_visits[b, index]
        return jnp.where(n > 0, self.children_value_sum[b, index] / jnp.maximum(n, 1), 0.0)


def init_tree(
    num_nodes: int,
    root_states: Any,
    root_prior_logp: chex.Array,
    root_value: chex.Array,
    root_legal: chex.Array,
    root_searchable: chex.Array,
    root_costs: chex.Array,
    root_terminal: chex.Array,
) -> Tree:
    """Preallocates B trees of `num_nodes` nodes and writes the roots at index 0.

    Shapes: root_* are [B, K] (prior_logp, legal, searchable, costs) or [B] (value,
    terminal); root_states is a pytree with leading [B].
    """
    chex.assert_rank(root_prior_logp, 2)
    batch, k = root_prior_logp.shape
    chex.assert_shape([root_legal, root_searchable, root_costs], (batch, k))
    chex.assert_shape([root_value, root_terminal], (batch,))
    bn, bnk = (batch, num_nodes), (batch, num_nodes, k)

    def _nodes(x):
        return jnp.zeros(bn + x.shape[1:], x.dtype).at[:, ROOT_INDEX].set(x)

    f32 = jnp.float32
    return Tree(
        node_visits=jnp.zeros(bn, jnp.int32),
        node_value_sum=jnp.zeros(bn, f32),
        raw_value=_nodes(jnp.where(root_terminal, 0.0, root_value).astype(f32)),
        parents=jnp.full(bn, NO_PARENT, jnp.int32),
        action_from_parent=jnp.full(bn, NO_PARENT, jnp.int32),
        depth=jnp.zeros(bn, jnp.int32),
        terminal=_nodes(root_terminal.astype(bool)),
        children_index=jnp.full(bnk, UNVISITED, jnp.int32),
        children_visits=jnp.zeros(bnk, jnp.int32),
        children_value_sum=jnp.zeros(bnk, f32),
        children_rewards=jnp.zeros(bnk, f32),
        prior_logp=jnp.full(bnk, -jnp.inf, f32).at[:, ROOT_INDEX].set(root_prior_logp.astype(f32)),
        legal=_nodes(root_legal.astype(bool)),
        searchable=_nodes(root_searchable.astype(bool)),
        costs=_nodes(root_costs.astype(f32)),
        states=jax.tree.map(_nodes, root_states),
    )
