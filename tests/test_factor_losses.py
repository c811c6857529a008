"""Action-mean clipped surrogate and the hindsight distillation term."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import factor_jax as fj
from factor_jax.synthetic import pad_batch, random_batch

B, T, A = 3, 5, 6
loss_fn = jax.jit(fj.action_mean_loss, static_argnames="clip_eps")
distill = jax.jit(fj.distillation_loss, static_argnames=("mode", "estimator"))


def test_action_mean_loss_hand_case():
    # Episode 0: action 0 has 2 tokens, action 1 has 1 token; episode 1: 1 action, 3 tokens.
    lr = [[[0.1, -0.5, 0.0], [0.3, 0.0, 0.0]], [[0.0, 0.25, -0.1], [0.0, 0.0, 0.0]]]
    coef = [[[2.0, -1.0, 0.0], [0.5, 0.0, 0.0]], [[-1.0, 3.0, 1.0], [0.0, 0.0, 0.0]]]
    mask = [[[1, 1, 0], [1, 0, 0]], [[1, 1, 1], [0, 0, 0]]]
    eps = 0.2

    def tok(r, c):  # -min(rho c, clip(rho) c), by hand
        rho = math.exp(r)
        return -min(rho * c, min(max(rho, 1 - eps), 1 + eps) * c)

    a00 = (tok(0.1, 2.0) + tok(-0.5, -1.0)) / 2   # -(2 e^0.1) and -(0.8 * -1): clipped
    a01 = tok(0.3, 0.5)                            # clipped: -(1.2 * 0.5)
    a10 = (tok(0.0, -1.0) + tok(0.25, 3.0) + tok(-0.1, 1.0)) / 3
    expected = (a00 + a01 + a10) / 3
    assert abs(a01 - (-0.6)) < 1e-12 and abs(tok(-0.5, -1.0) - 0.8) < 1e-12
    logp_old = jnp.full((2, 2, 3), -1.0)
    logp = logp_old + jnp.array(lr)
    loss, metrics = loss_fn(logp, logp_old, jnp.array(coef), jnp.array(mask, bool), clip_eps=eps)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    assert 0.0 <= float(metrics["clip_frac"]) <= 1.0


@given(st.integers(0, 2**31 - 1))
def test_padding_never_changes_the_loss(seed):
    rng = np.random.default_rng(seed)
    b = random_batch(rng, B, T, A)
    b["coef"] = np.where(b["token_mask"], rng.normal(size=(B, T, A)), 0).astype(np.float32)
    p = pad_batch(b, 2, 3, rng, garbage=np.inf)
    out = loss_fn(b["logp"], b["logp_old"], b["coef"], b["token_mask"], clip_eps=0.2)
    out_p = loss_fn(p["logp"], p["logp_old"], p["coef"], p["token_mask"], clip_eps=0.2)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), out, out_p)
    d = distill(b["logp"], b["teacher_logp"], b["token_mask"])
    d_p = distill(p["logp"], p["teacher_logp"], p["token_mask"])
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), d, d_p)
    assert np.isfinite(float(out_p[0])) and np.isfinite(float(d_p[0]))


def test_loss_gradient_flows_through_logp_only():
    b = random_batch(np.random.default_rng(0), B, T, A)
    coef = jnp.where(b["token_mask"], 1.0, 0.0)
    g = jax.grad(lambda lp, c: fj.action_mean_loss(lp, b["logp_old"], c, b["token_mask"], 0.2)[0],
                 argnums=(0, 1))(jnp.asarray(b["logp"]), coef)
    assert np.any(g[0]) and not np.any(g[1])
    assert not np.any(np.asarray(g[0])[~b["token_mask"]])


def test_distillation_value_and_gradients_by_hand():
    student = jnp.array([[[-1.0, -2.0, 5.0]]])
    teacher = jnp.array([[[-0.5, -3.0, 7.0]]])
    mask = jnp.array([[[True, True, False]]])
    d = np.array([-0.5, 1.0])  # log pi_theta - log pi_T on the two real tokens
    k3 = np.exp(-d) - 1 + d
    for est in ("reverse_kl", "k3"):
        (loss, metrics), (g_s, g_t) = jax.value_and_grad(
            lambda s, t: fj.distillation_loss(s, t, mask, estimator=est), argnums=(0, 1),
            has_aux=True)(student, teacher)
        np.testing.assert_allclose(loss, k3.mean(), rtol=1e-6)  # one action, mean of 2 tokens
        np.testing.assert_allclose(metrics["distill_kl"], k3.mean(), rtol=1e-6)
        expected = d / 2 if est == "reverse_kl" else (1 - np.exp(-d)) / 2
        np.testing.assert_allclose(np.asarray(g_s)[0, 0, :2], expected, rtol=1e-6)
        assert float(g_s[0, 0, 2]) == 0.0 and not np.any(g_t)  # padding, teacher frozen


@pytest.mark.parametrize("kwargs, field", [({"mode": "token_sum"}, "mode"),
                                           ({"estimator": "fkl"}, "estimator")])
def test_bad_config_raises(kwargs, field):
    x, m = jnp.zeros((1, 1, 2)), jnp.ones((1, 1, 2), bool)
    with pytest.raises(ValueError, match=field):
        fj.distillation_loss(x, x, m, **kwargs)
    with pytest.raises(ValueError, match="clip_eps"):
        fj.action_mean_loss(x, x, x, m, clip_eps=0.0)
