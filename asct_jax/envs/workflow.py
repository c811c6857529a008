"""The enumerated tree of a staged-workflow environment's prefixes (ragspace builds one;
the search's execution cache and AgentUCT's T_hat read it, asct_jax.search.workflow)."""
from __future__ import annotations

from typing import NamedTuple

import chex


class WorkflowTree(NamedTuple):
    """Every workflow prefix of a staged-workflow environment: node 0 is the empty prefix,
    an edge (p, k) takes candidate k at p. P nodes, K candidate slots.

    Attributes:
      children: [P, K] int32, the node reached by candidate k at node p; -1 where illegal.
      terminal: [P] bool, the prefix is a complete workflow.
      edge_tokens: [P, K] float32, nominal auxiliary tokens of executing (p, k) (the
        allocation proxy; the ledger charges the realized `action_costs`); 0 where illegal.
      depth: [P] int32, decisions in the prefix.
    """

    children: chex.Array
    terminal: chex.Array
    edge_tokens: chex.Array
    depth: chex.Array
