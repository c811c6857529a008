"""Per-token coefficients C_{t,j} = A*_t * omega_{t,j} (docs/methods.md, FACTOR > Token
coefficients), the allocation of an action credit over its tokens, and the whole FACTOR
credit.

Shapes: [B, T] per action, [B, T, A] per token.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from factor_jax.apm import apm_weights
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
    coef = credit[..., None] * weights  # C = A*_t * omega_{t,j}
    return jax.lax.stop_gradient(jnp.where(token_mask, coef, 0.0))  # one select: 0 at padding


# weigh(scores [B, T, A], token_mask [B, T, A]) -> omega [B, T, A]: where among an
# action's tokens its credit goes (apm_weights, softmax_weights, uniform, ...).
TokenWeights = Callable[[chex.Array, chex.Array], chex.Array]


@chex.dataclass(frozen=True)
class Allocation:
    """How an action credit was spread over its tokens (hindsight_allocation).

    Attributes:
      credit: [B, T] float, A_t the action credit (0 on padded turns).
      delta: [B, T, A] float, log pi_T - log pi_S (HTA).
      scores: [B, T, A] float, s_{t,j} = sign(A_t) delta_{t,j} (HTA).
      weights: [B, T, A] float, omega_{t,j} (APM, or an ablation's weights).
    """

    credit: chex.Array
    delta: chex.Array
    scores: chex.Array
    weights: chex.Array


def hindsight_allocation(credit: chex.Array, teacher_logp: chex.Array,
                         student_logp: chex.Array, token_mask: chex.Array,
                         weigh: TokenWeights) -> Tuple[chex.Array, Allocation]:
    """HTA scores -> token weights -> C: spreads an action credit over its tokens
    (docs/methods.md, FACTOR > HTA, APM, Token coefficients).

      s_{t,j} = sign(A_t) (log pi_T - log pi_S)       (HTA)
      omega   = weigh(s, token_mask)                   (APM: apm_weights; ablations:
                                                       softmax_weights, uniform)
      C_{t,j} = sg(A_t omega_{t,j})

    Args:
      credit: [B, T] float, A_t (TAC's A*_t, or another action credit such as GRPO's),
        0 on padded turns.
      teacher_logp, student_logp: [B, T, A] float. token_mask: [B, T, A] bool.
      weigh: (scores, token_mask) -> weights [B, T, A].
    Returns:
      (coef [B, T, A], Allocation).
    """
    scores, delta = hta_scores(teacher_logp, student_logp, credit, token_mask,
                               return_delta=True)
    weights = weigh(scores, token_mask)
    coef = token_coefficients(credit, weights, token_mask)
    return coef, Allocation(credit=credit, delta=delta, scores=scores, weights=weights)


def factor_coefficients(rewards: chex.Array, values: chex.Array, baseline: chex.Array,
                        turn_mask: chex.Array, teacher_logp: chex.Array,
                        student_logp: chex.Array, token_mask: chex.Array,
                        tau: float = 1.0, transform="exp",
                        clip: Optional[Tuple[float, float]] = None
                        ) -> Tuple[chex.Array, Allocation]:
    """TAC -> HTA -> APM -> C: the FACTOR per-token coefficients of a batch
    (docs/methods.md, FACTOR). The ablations compose the same pieces differently
    (factor_jax.methods).

      A*_t = r_t + V~(x_{t+1}) - V~(x_t)               (TAC, see tac_credit)
      s_{t,j} = sign(A*_t) (log pi_T - log pi_S)        (HTA)
      omega_{t,j} = L_t u_{t,j} / sum_j u_{t,j}         (APM, see apm_weights)
      C_{t,j} = sg(A*_t omega_{t,j})

    Args:
      rewards, values: [B, T] float. baseline: [B] float. turn_mask: [B, T] bool.
      teacher_logp, student_logp: [B, T, A] float. token_mask: [B, T, A] bool.
      tau, transform, clip: see apm_weights.
    Returns:
      (coef [B, T, A], Allocation with credit A* [B, T], delta, scores, weights [B, T, A]).
    """
    credit = tac_credit(rewards, values, baseline, turn_mask)
    scores, delta = hta_scores(teacher_logp, student_logp, credit, token_mask,
                               return_delta=True)
    weights = apm_weights(scores, token_mask, tau=tau, transform=transform, clip=clip)
    # apm_weights is exactly 0 at padding, so C needs no mask here (token_coefficients'
    # select would read the mask again and split XLA's fused pass in two).
    chex.assert_equal_shape_prefix([credit, weights], 2)
    coef = jax.lax.stop_gradient(credit[..., None] * weights)  # C = sg(A*_t * omega_{t,j})
    return coef, Allocation(credit=credit, delta=delta, scores=scores, weights=weights)
