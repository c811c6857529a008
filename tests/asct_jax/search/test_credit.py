"""Tests of ASCT's credit kernel (asct_jax.search.credit, the paper's Eqs. 3-4) on
hand-computed cases, and the credit methods' per-iteration actor-scoring ledger."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from asct_jax.search import policy_weighted_advantage


# --------------------------------------------- the paper's actor-centred credit (Eqs. 3-4)
def _pwa(q, mask, logp, taken, turn=None):
    q, mask, logp = (np.asarray(x)[None, None] for x in (q, mask, logp))
    taken = np.asarray([[taken]], np.int32)
    turn = np.ones((1, 1), bool) if turn is None else np.asarray([[turn]])
    return float(policy_weighted_advantage(q, mask, logp, taken, turn)[0, 0])


def test_policy_weighted_advantage_hand_worked():
    # Q_hat = (0.6, 0.2, 0.5), p = (0.5, 0.3, 0.2): V_hat = 0.3 + 0.06 + 0.1 = 0.46.
    q = np.array([0.6, 0.2, 0.5], np.float32)
    p = np.log(np.array([0.5, 0.3, 0.2], np.float32))
    m = np.ones(3, bool)
    assert _pwa(q, m, p, 0) == pytest.approx(0.6 - 0.46, abs=1e-6)
    assert _pwa(q, m, p, 1) == pytest.approx(0.2 - 0.46, abs=1e-6)
    # The same table with uniform centring (mean 0.4333) gives +0.0667 for action 2; the
    # actor's weights give 0.5 - 0.46 = +0.04, and for action 1 the two differ in size.
    assert _pwa(q, m, p, 2) == pytest.approx(0.04, abs=1e-6)
    # Not a real turn, or no taken action: 0.
    assert _pwa(q, m, p, 0, turn=False) == 0.0
    assert _pwa(q, m, p, -1) == 0.0
    # An action without estimate is left out and the weights renormalised: p = (.5, .2)/.7.
    m2 = np.array([True, False, True])
    v = (0.5 * 0.6 + 0.2 * 0.5) / 0.7
    assert _pwa(q, m2, p, 2) == pytest.approx(0.5 - v, abs=1e-6)
    assert _pwa(q, m2, p, 1) == 0.0           # the taken action has no estimate


@given(st.integers(0, 2**31 - 1), st.integers(2, 6))
def test_policy_weighted_advantage_centred_under_pi_old(seed, k):
    """sum_a p_a A(s, a) = 0: the credit is centred under the frozen actor (the baseline
    subtracted once), and adding a constant to Q_hat leaves A unchanged."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, k, k)).astype(np.float32)
    logits = rng.normal(size=(1, k, k))
    logp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
    mask = np.ones((1, k, k), bool)
    taken = np.arange(k, dtype=np.int32)[None]          # turn j takes action j
    turn = np.ones((1, k), bool)
    a = np.asarray(policy_weighted_advantage(q, mask, logp, taken, turn))
    # Every turn has the same state here only if rows are equal: use row 0 for all.
    q0 = np.repeat(q[:, :1], k, 1)
    lp0 = np.repeat(logp[:, :1], k, 1)
    a0 = np.asarray(policy_weighted_advantage(q0, mask, lp0, taken, turn))[0]
    np.testing.assert_allclose(np.sum(np.exp(lp0[0, 0]) * a0), 0.0, atol=1e-5)
    a_shift = np.asarray(policy_weighted_advantage(q + 3.0, mask, logp, taken, turn))
    np.testing.assert_allclose(a_shift, a, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["vineppo", "asct_actor_rollout"])
def test_each_step_charges_the_actor_scoring_again_not_the_executions(credit_setup, method):
    """The method's credit starts every step (iteration) with an empty scored namespace
    (asct_jax.search.cache.new_iteration): the same batch credited again with the carried
    cache pays no environment tokens (every prefix executed at step 0) and the same actor
    scoring tokens as step 0 (the paper reuses pi_old's probabilities only under one
    frozen actor)."""
    import jax
    import jax.numpy as jnp

    from experiments.configs import base
    from experiments.harness import registry

    c = base.use_test_model(base.get_config())
    c.env.name = "ragspace"
    c.vineppo.k = c.asct.trials = 3
    c, ctx, params, batch = credit_setup(c, num_groups=2, group_size=1)
    m = registry.get(method)
    cfg = m.make_config(c)
    fn = jax.jit(m.make_credit(cfg, ctx))
    key = jax.random.key(2)
    first = fn(params, batch, key, jnp.int32(0), m.init_state(cfg, ctx, params, key))
    again = fn(params, batch, key, jnp.int32(1), first.state)
    assert float(first.metrics["t_env"]) > 0 and float(first.metrics["t_actor"]) > 0
    assert float(again.metrics["t_env"]) == 0.0
    assert float(again.metrics["t_actor"]) == float(first.metrics["t_actor"])
    assert np.asarray(again.state.executed).sum() == np.asarray(first.state.executed).sum()
