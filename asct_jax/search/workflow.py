"""What the search asks of a staged-workflow environment (the ASCT paper's workflows:
ragspace), as a protocol: an environment that has these methods gets the execution cache
and AgentUCT's cached-cost estimate T_hat; any other is searched without them.

`workflow_of(env, params)` is the one question the search asks: the WorkflowTree, or None.
"""
from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

import chex

from asct_jax.envs.workflow import WorkflowTree


@runtime_checkable
class StagedWorkflow(Protocol):
    """An environment whose states are named by (question, workflow prefix)."""

    def workflow(self, params: Any) -> Optional[WorkflowTree]:
        """The enumerated workflow tree (None: not a staged workflow after all)."""

    def workflow_node(self, state: Any, params: Any) -> chex.Array:
        """int32 []: the WorkflowTree node of the state's executed prefix."""

    def question_id(self, state: Any, params: Any) -> chex.Array:
        """int32 [] in [0, num_questions): the task the state answers (cache namespace row).
        Given (question_id, workflow_node) the state is fully determined."""

    def num_questions(self, params: Any) -> int:
        """Size of the question pool over every split (static)."""


def workflow_of(env: Any, params: Any) -> Optional[WorkflowTree]:
    """env's WorkflowTree when env is a staged workflow (StagedWorkflow), else None: no
    execution cache, and T_hat falls back to env.action_costs."""
    hook = getattr(env, "workflow", None)
    return None if hook is None else hook(params)
