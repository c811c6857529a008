"""factor_jax.serl (SERL's token multipliers, coefficients and lambda schedule) against the
FACTOR authors' code: their unit tests' hand-worked numbers (re-derived here, in our
layout: tests/helpers/factor_kernels.py), and properties (the multipliers' bounds).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, strategies as st

import factor_jax as fj
from tests.helpers.factor_kernels import B, PROPS, f32, masks as _masks

serl_mult = jax.jit(fj.serl_token_weights, static_argnames="clip")
serl_coef = jax.jit(fj.serl_coefficients, static_argnames="clip")


def test_serl_hand_case():
    adv = f32([1.5, -2.0])
    delta = f32([[[0.1, 0.5, -0.5, 30.0]], [[0.1, 0.5, -0.5, 30.0]]])
    act = jnp.array([[[True, True, False, False]], [[True, True, True, True]]])
    tok = jnp.array([[[True, True, True, False]], [[True, True, True, True]]])
    lam = 0.3
    # A > 0: w = clip(e^delta, .8, 1.2) = (e^.1, 1.2); token 2 is a reasoning token (1).
    # A < 0: w = clip(e^-delta) = (e^-.1, .8, 1.2, clip(e^-20) = .8).
    m0 = [0.7 + 0.3 * math.exp(0.1), 0.7 + 0.3 * 1.2, 1.0, 1.0]
    m1 = [0.7 + 0.3 * w for w in (math.exp(-0.1), 0.8, 1.2, 0.8)]
    np.testing.assert_allclose(serl_mult(delta, adv, act, lam), [[m0], [m1]], rtol=1e-6)
    expected = np.array([[[1.5 * m for m in m0[:3]] + [0.0]], [[-2.0 * m for m in m1]]])
    np.testing.assert_allclose(serl_coef(adv, delta, act, tok, lam), expected, rtol=1e-6)
    # lam = 0 is plain GRPO on every response token.
    np.testing.assert_allclose(serl_coef(adv, delta, act, tok, 0.0),
                               np.where(tok, np.asarray(adv)[:, None, None], 0.0))


@PROPS
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 1.0), st.sampled_from([0.0, 0.2, 0.5]))
def test_serl_multiplier_bounds(seed, lam, clip):
    rng = np.random.default_rng(seed)
    _, token_mask = _masks(rng, min_len=1)
    act = token_mask & (rng.random(token_mask.shape) < 0.5)
    delta = np.where(act, 10 * rng.normal(size=act.shape), np.nan).astype(np.float32)
    adv = f32(rng.normal(size=B))
    m = np.asarray(serl_mult(f32(delta), adv, jnp.asarray(act), lam, clip=clip))
    lo, hi = 1 - lam * clip - 1e-6, 1 + lam * clip + 1e-6
    assert np.all(m[act] >= lo) and np.all(m[act] <= hi)
    np.testing.assert_array_equal(m[~act], 1.0)
    c = np.asarray(serl_coef(adv, f32(delta), jnp.asarray(act), jnp.asarray(token_mask), lam,
                             clip=clip))
    np.testing.assert_array_equal(c[~token_mask], 0.0)
    np.testing.assert_allclose(c[token_mask], (np.asarray(adv)[:, None, None] * m)[token_mask],
                               rtol=1e-6)


def test_serl_lambda_schedule():
    # lam_k = 0.5 max(0, 1 - (k - 1) / 50), k 1-indexed: lam0 at the first update.
    for k, lam in [(1, 0.5), (11, 0.4), (26, 0.25), (51, 0.0), (80, 0.0), (0, 0.5)]:
        np.testing.assert_allclose(fj.serl_lambda(k), lam, atol=1e-7)
    np.testing.assert_allclose(jax.jit(fj.serl_lambda)(jnp.int32(26)), 0.25, atol=1e-7)
    np.testing.assert_allclose(fj.serl_lambda(6, lam0=1.0, decay_steps=10), 0.5, atol=1e-7)
    np.testing.assert_allclose(fj.serl_lambda(500, decay_steps=0), 0.5)  # SERL: no decay
