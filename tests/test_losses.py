"""Tests of asct_jax/rl/losses.py: the clipped surrogate, the aggregations, the KL, entropy
and value terms, on hand cases."""
import jax.numpy as jnp
import numpy as np
import pytest

from asct_jax.rl import losses as L


def test_clipped_surrogate_hand_case():
    # rho = e^{log 2} = 2 > 1 + eps: positive C clipped at 1.2 C, negative C kept at 2 C.
    logp = jnp.log(jnp.array([2.0, 2.0, 1.0]))
    out = L.clipped_surrogate(logp, jnp.zeros(3), jnp.array([1.0, -1.0, 3.0]), 0.2)
    np.testing.assert_allclose(out, [-1.2, 2.0, -3.0], rtol=1e-6)


def test_aggregations_weigh_tokens_episodes_actions():
    x = jnp.array([[[1.0, 3.0], [5.0, 0.0]], [[2.0, 0.0], [0.0, 0.0]]])   # [B=2, T=2, A=2]
    m = jnp.array([[[True, True], [True, False]], [[True, False], [False, False]]])
    np.testing.assert_allclose(L.aggregate(x, m, "token_mean"), 11.0 / 4)
    np.testing.assert_allclose(L.aggregate(x, m, "sequence_mean"), (9.0 / 3 + 2.0) / 2)
    np.testing.assert_allclose(L.aggregate(x, m, "action_mean"), (2.0 + 5.0 + 2.0) / 3)
    with pytest.raises(ValueError, match="aggregation"):
        L.aggregate(x, m, "sum")


def test_policy_loss_at_the_old_policy():
    logp = jnp.full((1, 2, 3), -0.5)
    m = jnp.ones((1, 2, 3), bool)
    loss, metrics = L.policy_loss(logp, logp, jnp.full((1, 2, 3), 2.0), m, 0.2)
    np.testing.assert_allclose(loss, -2.0)
    assert float(metrics["clip_frac"]) == 0.0 and float(metrics["approx_kl"]) == 0.0


def test_kl_entropy_and_value_terms():
    m = jnp.array([[[True, False]]])
    logp = jnp.array([[[-1.0, -9.0]]])
    assert float(L.kl_penalty(logp, logp, m)) == 0.0
    r = 0.5   # ref - theta on the real token: exp(r) - 1 - r
    np.testing.assert_allclose(L.kl_penalty(logp, logp + r, m), np.exp(r) - 1 - r, rtol=1e-6)
    np.testing.assert_allclose(L.entropy_bonus(jnp.array([[[0.7, 5.0]]]), m), 0.7)
    values, targets = jnp.array([[1.0, 2.0, 9.0]]), jnp.array([[0.0, 0.0, 0.0]])
    turns = jnp.array([[True, True, False]])
    np.testing.assert_allclose(L.value_loss(values, targets, turns), 0.5 * (1 + 4) / 2)
