"""Per-token coefficients C_{t,j} = A*_t * omega_{t,j} (docs/methods.md, FACTOR > Token
coefficients): an action's credit spread over its tokens.

Shapes: [B, T] per action, [B, T, A] per token.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def token_coefficients(credit: chex.Array, weights: chex.Array,
                       token_mask: chex.Array) -> chex.Array:
    """C_{t,j} = stop_gradient(A*_t * omega_{t,j}); 0 at padding.

    With mean-1 weights (APM), (1/L_t) sum_j C_{t,j} = A*_t: the action's credit is
    conserved, only its distribution over tokens changes.

    Args:
      credit: [B, T] float, A*_t.
      weights: [B, T, A] float, omega_{t,j}.
      token_mask: [B, T, A] bool.
    Returns:
      [B, T, A] coefficients (stop-gradient).
    """
    chex.assert_rank([credit, weights, token_mask], [2, 3, 3])
    chex.assert_type([credit, weights, token_mask], [float, float, bool])
    chex.assert_equal_shape([weights, token_mask])
    chex.assert_equal_shape_prefix([credit, weights], 2)
    coef = credit[..., None] * weights  # C = A*_t * omega_{t,j}
    return jax.lax.stop_gradient(jnp.where(token_mask, coef, 0.0))  # one select: 0 at padding
