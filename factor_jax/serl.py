"""SERL (selective hindsight distillation, arXiv 2605.19447): the paper's main baseline.

GRPO advantage per episode, reweighted on action tokens by the hindsight teacher; no
renormalisation to mean 1 (contrast with APM). Shapes: [B] per episode, [B, T, A] per token.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from factor_jax._checks import check_range

SERL_CLAMP = 20.0  # |sign(A) * delta| is clamped to this before exp
SERL_W_MIN, SERL_W_MAX = 0.8, 1.2  # token weight range


def serl_token_weights(advantage: chex.Array, delta: chex.Array,
                       token_mask: chex.Array) -> chex.Array:
    """w_{t,j} = clip(exp(clamp(sign(A) * delta_{t,j}, -20, 20)), 0.8, 1.2); 0 at padding.

    Args:
      advantage: [B] float, A (GRPO advantage of the episode).
      delta: [B, T, A] float, log pi_T - log pi_S per token.
      token_mask: [B, T, A] bool.
    Returns:
      [B, T, A] weights in [0.8, 1.2] on real tokens.
    """
    chex.assert_rank([advantage, delta, token_mask], [1, 3, 3])
    chex.assert_type([advantage, delta, token_mask], [float, float, bool])
    chex.assert_equal_shape([delta, token_mask])
    chex.assert_equal_shape_prefix([advantage, delta], 1)
    sign = jnp.sign(advantage)[:, None, None].astype(delta.dtype)
    x = jnp.clip(sign * jnp.where(token_mask, delta, 0.0), -SERL_CLAMP, SERL_CLAMP)
    w = jnp.clip(jnp.exp(x), SERL_W_MIN, SERL_W_MAX)  # w = clip(exp(clamp(.)), 0.8, 1.2)
    return jnp.where(token_mask, w, 0.0)


def serl_coefficients(advantage: chex.Array, delta: chex.Array, token_mask: chex.Array,
                      lam) -> chex.Array:
    """SERL per-token coefficients C_{t,j} = sg(A * ((1 - lam) + lam * w_{t,j})).

    No renormalisation: the action mean of C is not A in general (it lies in
    A * [1 - 0.2 lam, 1 + 0.2 lam]).

    Args:
      advantage: [B] float, GRPO advantage (G_i - b) / std of each episode.
      delta: [B, T, A] float, hindsight log-ratio log pi_T - log pi_S.
      token_mask: [B, T, A] bool.
      lam: scalar in [0, 1] (see serl_lambda); may be traced.
    Returns:
      [B, T, A] coefficients (stop-gradient), 0 at padding.
    """
    check_range("lam", lam, lo=0.0, hi=1.0)
    w = serl_token_weights(advantage, delta, token_mask)
    coef = advantage[:, None, None] * ((1.0 - lam) + lam * w)  # A * ((1 - lam) + lam w)
    return jax.lax.stop_gradient(jnp.where(token_mask, coef, 0.0))


def serl_lambda(step, lam0: float = 0.5, decay_steps: int = 50):
    """lam(step) = lam0 * max(0, 1 - step / decay_steps): linear decay lam0 -> 0.

    Args:
      step: training step (int or traced scalar), 0-based.
      lam0: initial mixing weight in [0, 1] (0.5 in SERL).
      decay_steps: steps to reach 0 (> 0; 50 in SERL).
    Returns:
      [] float32 lam.
    """
    check_range("lam0", lam0, lo=0.0, hi=1.0)
    check_range("decay_steps", decay_steps, lo=0.0, lo_open=True)
    frac = jnp.asarray(step, jnp.float32) / jnp.asarray(decay_steps, jnp.float32)
    return lam0 * jnp.clip(1.0 - frac, 0.0, 1.0)
