"""ASCT tree-search kernels: batched tree arrays, selection rules, search, credit."""
from asct_jax.search.credit import (CENTRE_MODES, asct_advantage, centre_q,
                                    policy_weighted_advantage)
from asct_jax.search.rollout_value import mc_return, rollout_return
from asct_jax.search.search import (
    BackupPath,
    Cost,
    EnvModel,
    SearchConfig,
    SearchOutput,
    SearchState,
    Selection,
    backward,
    evaluate_leaf,
    expand,
    make_search_config,
    make_search_fn,
    search,
    simulate,
    simulation_cost,
)
from asct_jax.search.selection import (
    HYPERPARAMS,
    RULES,
    NodeStats,
    SelectionFn,
    agentuct,
    cost_hat,
    linear_schedule,
    make_selection,
    puct,
    uct,
    uniform,
)
from asct_jax.search.tree import Tree, init_tree

__all__ = [
    "BackupPath", "CENTRE_MODES", "Cost", "EnvModel", "HYPERPARAMS", "RULES", "NodeStats",
    "SearchConfig", "SearchOutput", "SearchState", "Selection", "SelectionFn", "Tree",
    "agentuct", "asct_advantage", "backward", "centre_q", "cost_hat", "evaluate_leaf",
    "expand", "init_tree", "linear_schedule", "make_search_config", "make_search_fn",
    "make_selection", "mc_return", "policy_weighted_advantage", "puct", "rollout_return", "search", "simulate",
    "simulation_cost", "uct", "uniform",
]
