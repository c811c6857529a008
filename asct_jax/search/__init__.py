"""ASCT tree-search kernels: batched tree arrays, selection rules, search, credit."""
from asct_jax.search.credit import CENTRE_MODES, asct_advantage, centre_q
from asct_jax.search.rollout_value import mc_return, rollout_return
from asct_jax.search.search import (
    SearchConfig,
    SearchOutput,
    make_search_config,
    make_search_fn,
    search,
)
from asct_jax.search.selection import (
    RULES,
    NodeStats,
    agentuct,
    cost_hat,
    linear_schedule,
    puct,
    uct,
    uniform,
)
from asct_jax.search.tree import Tree, init_tree

__all__ = [
    "CENTRE_MODES", "RULES", "NodeStats", "SearchConfig", "SearchOutput", "Tree",
    "agentuct", "asct_advantage", "centre_q", "cost_hat", "init_tree", "linear_schedule",
    "make_search_config", "make_search_fn", "mc_return", "puct", "rollout_return",
    "search", "uct", "uniform",
]
