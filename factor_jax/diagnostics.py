"""FACTOR diagnostics (the paper's Figure 5): conservation and calibration.

Shapes: [B, T] per action, [B, T, A] per token.
"""
from __future__ import annotations

from typing import Dict, Tuple

import chex
import jax.numpy as jnp


def conservation_error(weights: chex.Array, token_mask: chex.Array) -> chex.Array:
    """|(1/L_t) sum_j omega_{t,j} - 1| per action; 0 for an action with no real token.

    Args:
      weights: [B, T, A] float, omega. token_mask: [B, T, A] bool.
    Returns:
      [B, T] float (should sit at 0 for APM; 1 - 1/L_t for softmax weights).
    """
    chex.assert_rank([weights, token_mask], 3)
    chex.assert_type([weights, token_mask], [float, bool])
    chex.assert_equal_shape([weights, token_mask])
    length = jnp.sum(token_mask, axis=-1).astype(weights.dtype)
    total = jnp.sum(jnp.where(token_mask, weights, 0.0), axis=-1)
    err = jnp.abs(total / jnp.maximum(length, 1.0) - 1.0)
    return jnp.where(length > 0, err, 0.0)


def credit_conservation_error(credit: chex.Array, rewards: chex.Array,
                              baseline: chex.Array, turn_mask: chex.Array) -> chex.Array:
    """|sum_t A*_t - (G - b)| per episode (TAC's telescoping identity). [B]."""
    chex.assert_equal_shape([credit, rewards, turn_mask])
    chex.assert_rank(baseline, 1)
    total = jnp.sum(jnp.where(turn_mask, credit, 0.0), axis=-1)
    ret = jnp.sum(jnp.where(turn_mask, rewards, 0.0), axis=-1)
    return jnp.abs(total - (ret - baseline))


def calibration_metrics(credit: chex.Array, reference: chex.Array,
                        mask: chex.Array) -> Dict[str, chex.Array]:
    """TAC credit vs an independent high-sample MC credit on the masked actions.

    Returns {"corr": Pearson r, "mae", "rmse", "bias": mean(credit - reference),
    "count"}, each []. Arrays of any equal shape.
    """
    chex.assert_equal_shape([credit, reference, mask])
    m = mask.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    x = jnp.where(mask, credit, 0.0)
    y = jnp.where(mask, reference, 0.0)
    mx, my = jnp.sum(x) / n, jnp.sum(y) / n
    dx, dy = (x - mx) * m, (y - my) * m
    cov = jnp.sum(dx * dy)
    corr = cov / jnp.sqrt(jnp.maximum(jnp.sum(dx**2) * jnp.sum(dy**2), 1e-30))
    err = (x - y) * m
    return {"corr": corr, "mae": jnp.sum(jnp.abs(err)) / n,
            "rmse": jnp.sqrt(jnp.sum(err**2) / n), "bias": jnp.sum(err) / n,
            "count": jnp.sum(m)}


def extreme_tokens(weights: chex.Array, token_mask: chex.Array) -> Tuple[chex.Array, chex.Array]:
    """Indices of the highest- and lowest-allocated real token of each action.

    For the perturbation diagnostic. Returns (argmax [B, T], argmin [B, T]) int32 (0 for
    an empty action).
    """
    chex.assert_equal_shape([weights, token_mask])
    hi = jnp.argmax(jnp.where(token_mask, weights, -jnp.inf), axis=-1)
    lo = jnp.argmin(jnp.where(token_mask, weights, jnp.inf), axis=-1)
    return hi.astype(jnp.int32), lo.astype(jnp.int32)
