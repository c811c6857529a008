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


def test_dual_clip_by_hand():
    # A = -1, rho = 5 (log 5), eps 0.2: the clipped loss is max(5 * 1, 1.2 * 1) = 5; the
    # dual clip c = 3 caps it at -c A = 3. A positive advantage is untouched: A = 1,
    # rho = 0.5 -> -min(0.5, 0.8) = -0.5 with or without it.
    logp = jnp.log(jnp.array([[5.0, 0.5, 5.0]]))
    old = jnp.zeros((1, 3))
    coef = jnp.array([[-1.0, 1.0, -0.5]])
    plain = L.clipped_surrogate(logp, old, coef, 0.2)
    dual = L.clipped_surrogate(logp, old, coef, 0.2, dual_clip=3.0)
    np.testing.assert_allclose(plain, [[5.0, -0.5, 2.5]], rtol=1e-6)
    np.testing.assert_allclose(dual, [[3.0, -0.5, 1.5]], rtol=1e-6)


def test_the_dual_clip_only_lowers_losses_of_negative_advantages():
    rng = np.random.default_rng(0)
    logp, old = jnp.asarray(rng.normal(size=(4, 6))), jnp.asarray(rng.normal(size=(4, 6)))
    coef = jnp.asarray(rng.normal(size=(4, 6)))
    plain = L.clipped_surrogate(logp, old, coef, 0.2)
    dual = L.clipped_surrogate(logp, old, coef, 0.2, dual_clip=3.0)
    assert bool(jnp.all(dual <= plain + 1e-7))
    assert bool(jnp.all(jnp.where(coef > 0, dual == plain, True)))
    assert bool(jnp.all(jnp.where(coef < 0, dual <= -3.0 * coef + 1e-6, True)))


def test_kl_clamp_by_hand():
    # r = ref - theta = 4: k3 = e^4 - 1 - 4 = 49.598 -> clamped to 10; r = -1: e^-1 = 0.3679.
    logp = jnp.array([[[0.0, 1.0]]])
    ref = jnp.array([[[4.0, 0.0]]])
    mask = jnp.ones((1, 1, 2), bool)
    k3 = [np.exp(4.0) - 5.0, np.exp(-1.0)]
    np.testing.assert_allclose(L.kl_penalty(logp, ref, mask), np.mean(k3), rtol=1e-5)
    np.testing.assert_allclose(L.kl_penalty(logp, ref, mask, clamp=10.0),
                               (10.0 + k3[1]) / 2, rtol=1e-5)
