"""Tests of factor_jax/figure5.py: Figure 5's Diagnostics, on experiments/tables/factor_fig5.py's
tiny config (no training: the initial parameters)."""
import jax
import numpy as np
import pytest

from asct_jax.rl.build import build_learner
from asct_jax.rl.sources import JaxEnvSource
from experiments.harness import registry
from experiments.tables import factor_fig5 as fig5
from tests.helpers.factor_fig5 import tiny_config
from factor_jax.figure5 import credit_step
from factor_jax.methods import factor_config

# The module fixture builds Figure 5's diagnostics on a learner: the slow tier.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    c = tiny_config(tmp_path_factory.mktemp("fig5"))
    source = JaxEnvSource(c)
    exp = build_learner(c, registry.get(c.method), source)
    diag = fig5.diagnostics(c, *fig5.exp_parts(c, source, exp))
    return c, exp, exp.init_state.params, diag


def test_weights_match_registered_credit(setup):
    c, exp, params, diag = setup
    batch = diag.collect(params, jax.random.key(3))
    mstate = exp.init_state.method_state
    pieces, cons, tac_sum_err, _ = diag.parts(params, batch, jax.random.key(4), mstate)
    credit = jax.jit(exp.credit_fn)(params, batch, jax.random.key(4),
                                    credit_step(factor_config(c)), mstate)
    np.testing.assert_allclose(np.asarray(pieces.coef), np.asarray(credit.coef), atol=1e-6)
    assert pieces.weights.shape == cons.weights_softmax.shape == batch.token_mask.shape
    assert cons.cons_apm.shape == batch.turn_mask.shape
    assert tac_sum_err.shape == batch.turn_mask.shape[:1]
