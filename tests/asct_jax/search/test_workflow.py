"""Tests of the staged-workflow protocol (asct_jax.search.workflow): what makes an
environment a staged workflow for the search."""
from asct_jax import search as S
from tests.helpers.tiny_workflow import TOY, WF, make_params


def test_workflow_of_asks_the_protocol():
    params = make_params()
    assert isinstance(WF, S.StagedWorkflow) and not isinstance(TOY, S.StagedWorkflow)
    assert S.workflow_of(WF, params).children.shape == (10, 3)
    assert S.workflow_of(TOY, TOY.make_params(seed=0)) is None
    assert S.init_cache(TOY, TOY.make_params(seed=0)) is None
