"""ASCT tree-search kernels: batched tree arrays, selection rules, search, execution cache,
credit."""
from asct_jax.search.cache import ExecutionCache, init_cache, t_hat_table
from asct_jax.search.credit import (CENTRE_MODES, asct_advantage, centre_q,
                                    policy_weighted_advantage)
from asct_jax.search.rollout_value import mc_return, rollout_return
from asct_jax.search.search import (
    CONTINUATIONS,
    EXPANSIONS,
    PAPER_EXPANSION,
    BackupPath,
    Cost,
    EnvModel,
    SearchConfig,
    SearchOutput,
    SearchState,
    Selection,
    Trace,
    backward,
    evaluate_leaf,
    expand,
    make_search_config,
    make_search_fn,
    paper_config,
    remaining_costs,
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
    agentuct_scores,
    agentuct_shrink,
    cost_hat,
    linear_schedule,
    make_selection,
    puct,
    uct,
    uct_prior,
    uct_scores,
    uniform,
    uniform_sample,
)
from asct_jax.search.tree import Tree, init_tree

__all__ = [
    "BackupPath", "CENTRE_MODES", "CONTINUATIONS", "Cost", "EXPANSIONS", "EnvModel",
    "ExecutionCache", "HYPERPARAMS", "PAPER_EXPANSION", "RULES", "NodeStats", "SearchConfig",
    "SearchOutput", "SearchState", "Selection", "SelectionFn", "Trace", "Tree", "agentuct",
    "agentuct_scores", "agentuct_shrink", "asct_advantage", "backward", "centre_q",
    "cost_hat", "evaluate_leaf", "expand", "init_cache", "init_tree", "linear_schedule",
    "make_search_config", "make_search_fn", "make_selection", "mc_return", "paper_config", "policy_weighted_advantage",
    "puct", "remaining_costs", "rollout_return", "search", "simulate", "simulation_cost",
    "t_hat_table", "uct", "uct_prior", "uct_scores", "uniform", "uniform_sample",
]
