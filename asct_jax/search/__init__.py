"""ASCT tree search, shaped as mctx: types, the batched tree, the search loop taking its
rules as callables, selection / expansion / continuation rules, the execution cache and
its accounting, the credit kernel."""
from asct_jax.search.accounting import trial_cost
from asct_jax.search.cache import (ExecutionCache, init_cache, new_iteration, remaining_costs,
                                   t_hat_table)
from asct_jax.search.continuation import (actor_continuation, continue_episode,
                                          cost_weighted_continuation, evaluate_leaf,
                                          uniform_continuation)
from asct_jax.search.credit import policy_weighted_advantage
from asct_jax.search.rollout_value import mc_return, rollout_return
from asct_jax.search.search import backward, expand, search, simulate
from asct_jax.search.selection import (agentuct, agentuct_scores, cost_weighted_expansion,
                                       prior_sample, uct, uct_scores, uniform,
                                       uniform_expansion)
from asct_jax.search.tree import Tree, init_tree
from asct_jax.search.types import (BackupPath, Cost, EnvModel, NodeStats, SearchConfig,
                                   SearchOutput, SearchRules, SearchState, Selection, Trace)
from asct_jax.search.workflow import StagedWorkflow, workflow_of

__all__ = [
    "BackupPath", "Cost", "EnvModel", "ExecutionCache", "NodeStats", "SearchConfig",
    "SearchOutput", "SearchRules", "SearchState", "Selection", "StagedWorkflow", "Trace",
    "Tree", "actor_continuation", "agentuct", "agentuct_scores", "backward",
    "continue_episode", "cost_weighted_continuation", "cost_weighted_expansion",
    "evaluate_leaf", "expand", "init_cache", "init_tree", "mc_return", "new_iteration",
    "policy_weighted_advantage", "prior_sample", "remaining_costs", "rollout_return",
    "search", "simulate", "t_hat_table", "trial_cost", "uct", "uct_scores", "uniform",
    "uniform_continuation", "uniform_expansion", "workflow_of",
]
