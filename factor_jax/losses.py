"""FACTOR's policy loss (action-mean clipped surrogate) and its hindsight distillation term.

Shapes: [B, T, A] per token; masks bool. Both return (scalar to minimise, metrics).
Padding is zeroed before any arithmetic, so garbage (even inf / nan) there changes nothing.
"""
from __future__ import annotations

from typing import Dict, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.rl import losses as rl_losses
from factor_jax._checks import check_choice, check_range

DISTILL_ESTIMATORS = ("reverse_kl", "k3")


def _zero_pad(token_mask, *xs):
    return tuple(jnp.where(token_mask, x, 0.0) for x in xs)


def action_mean_loss(logp: chex.Array, logp_old: chex.Array, coef: chex.Array,
                     token_mask: chex.Array, clip_eps: float
                     ) -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """Per-token clipped surrogate with coefficients C, aggregated action-mean.

      rho_{t,j} = pi_theta(y_{t,j}) / pi_old(y_{t,j})
      l_{t,j}   = -min(rho C_{t,j}, clip(rho, 1 - eps, 1 + eps) C_{t,j})
      L         = mean_{(i,t) real} [ (1/L_t) sum_j l_{t,j} ]   (every action weighs the same)

    Args:
      logp: [B, T, A] float, log pi_theta(y_{t,j} | x_t, y_{t,<j}) (differentiated).
      logp_old: [B, T, A] float, log pi_old (behaviour policy of the batch).
      coef: [B, T, A] float, C_{t,j} (treated as a constant).
      token_mask: [B, T, A] bool.
      clip_eps: PPO clip epsilon > 0.
    Returns:
      (loss [], metrics {"clip_frac", "approx_kl"}) as asct_jax.rl.losses.policy_loss.
    """
    chex.assert_rank([logp, logp_old, coef, token_mask], 3)
    chex.assert_type([logp, logp_old, coef, token_mask], [float, float, float, bool])
    chex.assert_equal_shape([logp, logp_old, coef, token_mask])
    check_range("clip_eps", clip_eps, lo=0.0, lo_open=True)
    logp, logp_old, coef = _zero_pad(token_mask, logp, logp_old, coef)
    return rl_losses.policy_loss(logp, logp_old, coef, token_mask, clip_eps,
                                 mode="action_mean")


def distillation_loss(logp_student: chex.Array, teacher_logp: chex.Array,
                      token_mask: chex.Array, mode: str = "action_mean",
                      estimator: str = "reverse_kl"
                      ) -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """Auxiliary distillation toward the frozen hindsight teacher on action tokens.

    With d_{t,j} = log pi_theta(y_{t,j}) - log pi_T(y_{t,j} | x_t, o_{t+1}, y_{t,<j}) on the
    batch's own tokens (sampled by pi_old ~ pi_theta) and the teacher a constant:

      "reverse_kl" (default; on-policy distillation, as in GKD / MiniLLM):
          l_{t,j} = sg(d) * (log pi_theta - sg(log pi_theta)) + sg(k3),
          grad l  = d * grad log pi_theta, the single-sample score-function gradient of the
                    per-token reverse KL(pi_theta || pi_T) (mode seeking; bounded by |d|);
          value   = k3 = exp(-d) - 1 + d >= 0, an unbiased low-variance estimate of that KL.
      "k3": l_{t,j} = exp(-d) - 1 + d differentiated directly: the same value, gradient
          (1 - pi_T / pi_theta) grad log pi_theta, whose expectation is the gradient of the
          forward KL(pi_T || pi_theta) (mass covering; unbounded where pi_T >> pi_theta).

    The per-token terms are aggregated by `mode` (asct_jax.rl.losses.aggregate; the
    FACTOR loss uses "action_mean", like its surrogate).

    Args:
      logp_student: [B, T, A] float, log pi_theta of the action tokens (differentiated).
      teacher_logp: [B, T, A] float, the hindsight teacher's log-probs (stop-gradient).
      token_mask: [B, T, A] bool.
      mode: one of asct_jax.rl.losses.AGGREGATIONS.
      estimator: one of DISTILL_ESTIMATORS.
    Returns:
      (loss [], metrics {"distill_kl": k3 estimate of KL(pi_theta || pi_T),
                         "distill_logratio": mean d}).
    """
    chex.assert_rank([logp_student, teacher_logp, token_mask], 3)
    chex.assert_type([logp_student, teacher_logp, token_mask], [float, float, bool])
    chex.assert_equal_shape([logp_student, teacher_logp, token_mask])
    check_choice("mode", mode, rl_losses.AGGREGATIONS)
    check_choice("estimator", estimator, DISTILL_ESTIMATORS)
    logp_student, teacher_logp = _zero_pad(token_mask, logp_student, teacher_logp)
    teacher_logp = jax.lax.stop_gradient(teacher_logp)
    d = logp_student - teacher_logp  # log pi_theta - log pi_T
    k3 = jnp.exp(-d) - 1.0 + d  # KL(pi_theta || pi_T) estimator, >= 0
    if estimator == "k3":
        per_token = k3
    else:
        sg = jax.lax.stop_gradient
        per_token = sg(d) * (logp_student - sg(logp_student)) + sg(k3)
    loss = rl_losses.aggregate(per_token, token_mask, mode)
    metrics = {
        "distill_kl": rl_losses.aggregate(jax.lax.stop_gradient(k3), token_mask, mode),
        "distill_logratio": rl_losses.aggregate(jax.lax.stop_gradient(d), token_mask, mode),
    }
    return loss, metrics
