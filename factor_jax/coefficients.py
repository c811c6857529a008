"""Per-token coefficients C_{t,j} = A*_t * omega_{t,j}, and the whole FACTOR credit.

Shapes: [B, T] per action, [B, T, A] per token.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from factor_jax.apm import apm_weights, uniform_weights
from factor_jax.hta import hta_scores
from factor_jax.tac import tac_credit


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
    coef = credit[..., None] * jnp.where(token_mask, weights, 0.0)  # C = A*_t * omega_{t,j}
    return jax.lax.stop_gradient(jnp.where(token_mask, coef, 0.0))


def factor_coefficients(rewards: chex.Array, values: chex.Array, baseline: chex.Array,
                        turn_mask: chex.Array, teacher_logp: chex.Array,
                        student_logp: chex.Array, token_mask: chex.Array,
                        tau: float = 1.0, transform="exp",
                        clip: Optional[Tuple[float, float]] = None,
                        normalisation: str = "apm", use_tac: bool = True,
                        use_hta: bool = True,
                        action_credit: Optional[chex.Array] = None
                        ) -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """TAC -> HTA -> APM -> C: the FACTOR per-token coefficients of a batch.

      A*_t = r_t + V~(x_{t+1}) - V~(x_t)               (TAC; or `action_credit` if given,
                                                       e.g. GRPO's, for "without TAC")
      s_{t,j} = sign(A*_t) (log pi_T - log pi_S)        (HTA; omega = 1 if not use_hta)
      omega_{t,j} = L_t u_{t,j} / sum_j u_{t,j}         (APM, see apm_weights)
      C_{t,j} = sg(A*_t omega_{t,j})

    Args:
      rewards, values: [B, T] float. baseline: [B] float. turn_mask: [B, T] bool.
      teacher_logp, student_logp: [B, T, A] float. token_mask: [B, T, A] bool.
      tau, transform, clip, normalisation: see apm_weights.
      use_tac: False requires action_credit [B, T] (the "without TAC" ablation).
      use_hta: False gives omega = 1 (the "without HTA" ablation).
    Returns:
      (coef [B, T, A], aux) with aux = {"credit" [B, T], "delta", "scores", "weights"
      [B, T, A]}.
    """
    if use_tac:
        credit = tac_credit(rewards, values, baseline, turn_mask)
    else:
        if action_credit is None:
            raise ValueError("use_tac=False needs action_credit [B, T] (e.g. GRPO advantages)")
        chex.assert_equal_shape([action_credit, turn_mask])
        credit = jnp.where(turn_mask, action_credit, 0.0)
    scores, delta = hta_scores(teacher_logp, student_logp, credit, token_mask,
                               return_delta=True)
    if use_hta:
        weights = apm_weights(scores, token_mask, tau=tau, transform=transform, clip=clip,
                              normalisation=normalisation)
    else:
        weights = uniform_weights(token_mask, scores.dtype)
    coef = token_coefficients(credit, weights, token_mask)
    return coef, {"credit": credit, "delta": delta, "scores": scores, "weights": weights}
