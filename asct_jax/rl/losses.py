"""Policy-gradient losses on per-token coefficients, and how they are aggregated.

Shapes: [B, T, A] per token (B episodes, T turns, A tokens per action), masks bool.
Every function returns a scalar to *minimise*.
"""
from __future__ import annotations

from typing import Dict, Tuple

import chex
import jax
import jax.numpy as jnp

AGGREGATIONS = ("token_mean", "sequence_mean", "action_mean")


def clipped_surrogate(logp: chex.Array, logp_old: chex.Array, coef: chex.Array,
                      clip_eps: float) -> chex.Array:
    """Per-token clipped PPO objective, negated.

      rho = exp(logp - logp_old)
      l   = -min(rho * C, clip(rho, 1 - eps, 1 + eps) * C)

    Args:
      logp, logp_old, coef: [..., A] float32; coef is treated as a constant.
    Returns:
      [..., A] per-token loss.
    """
    chex.assert_equal_shape([logp, logp_old, coef])
    coef = jax.lax.stop_gradient(coef)
    rho = jnp.exp(logp - logp_old)
    unclipped = rho * coef
    clipped = jnp.clip(rho, 1.0 - clip_eps, 1.0 + clip_eps) * coef
    return -jnp.minimum(unclipped, clipped)


def aggregate(x: chex.Array, token_mask: chex.Array, mode: str) -> chex.Array:
    """Reduces a per-token quantity [B, T, A] to a scalar.

      token_mean:    sum_{i,t,j} m x / sum m                (every token weighs the same)
      sequence_mean: mean_i [ sum_{t,j} m x / sum_{t,j} m ] (every episode the same)
      action_mean:   mean_{(i,t) real} [ (1/L_t) sum_j m x ] (every action the same;
                     L_t = number of real tokens of the action)
    """
    chex.assert_rank([x, token_mask], 3)
    chex.assert_equal_shape([x, token_mask])
    m = token_mask.astype(x.dtype)
    if mode == "token_mean":
        return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)
    if mode == "sequence_mean":
        per_seq = jnp.sum(x * m, axis=(1, 2)) / jnp.maximum(jnp.sum(m, axis=(1, 2)), 1.0)
        has = jnp.any(token_mask, axis=(1, 2)).astype(x.dtype)
        return jnp.sum(per_seq * has) / jnp.maximum(jnp.sum(has), 1.0)
    if mode == "action_mean":
        lengths = jnp.sum(m, axis=-1)  # L_t
        per_action = jnp.sum(x * m, axis=-1) / jnp.maximum(lengths, 1.0)
        has = (lengths > 0).astype(x.dtype)
        return jnp.sum(per_action * has) / jnp.maximum(jnp.sum(has), 1.0)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def policy_loss(logp: chex.Array, logp_old: chex.Array, coef: chex.Array,
                token_mask: chex.Array, clip_eps: float,
                mode: str = "token_mean") -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """Clipped surrogate aggregated by `mode`, with PPO diagnostics.

    Returns (loss, metrics) with metrics clip_frac and approx_kl = E[(rho - 1) - log rho]
    (the k3 estimator of KL(pi_old || pi_theta)), both token means.
    """
    per_token = clipped_surrogate(logp, logp_old, coef, clip_eps)
    loss = aggregate(per_token, token_mask, mode)
    log_ratio = logp - logp_old
    rho = jnp.exp(log_ratio)
    clipped = (jnp.abs(rho - 1.0) > clip_eps).astype(jnp.float32)
    metrics = {
        "clip_frac": aggregate(clipped, token_mask, "token_mean"),
        "approx_kl": aggregate((rho - 1.0) - log_ratio, token_mask, "token_mean"),
    }
    return loss, metrics


def kl_penalty(logp: chex.Array, logp_ref: chex.Array, token_mask: chex.Array,
               mode: str = "token_mean") -> chex.Array:
    """KL(pi_theta || pi_ref) per token by the k3 estimator exp(r) - 1 - r, r = ref - theta."""
    r = logp_ref - logp
    return aggregate(jnp.exp(r) - 1.0 - r, token_mask, mode)


def entropy_bonus(entropy: chex.Array, token_mask: chex.Array,
                  mode: str = "token_mean") -> chex.Array:
    """Mean per-token entropy [B, T, A] (to be subtracted from the loss with a weight)."""
    return aggregate(entropy, token_mask, mode)


def value_loss(values: chex.Array, targets: chex.Array, turn_mask: chex.Array) -> chex.Array:
    """0.5 * mean over real turns of (V(x_t) - target_t)^2; targets are constants. [B, T]."""
    chex.assert_equal_shape([values, targets, turn_mask])
    m = turn_mask.astype(values.dtype)
    err = values - jax.lax.stop_gradient(targets)
    return 0.5 * jnp.sum(m * err**2) / jnp.maximum(jnp.sum(m), 1.0)


def forward_kl(teacher_logp_all: chex.Array, student_logp_all: chex.Array,
               support_mask: chex.Array) -> chex.Array:
    """Per-token forward KL from the hindsight teacher to the policy over the allowed
    tokens of each position (the distillation term of FACTOR's objective, which the
    authors call SERL's action-only KL; compute_serl_action_kl in their factor/hta.py):

      KL_j(pi_T || pi_theta) = sum_k mask_{k,j} p_T,{k,j} (log p_T,{k,j} - log p_theta,{k,j})

    For our constrained-decoding actor, entry [k, j] is the log-prob of candidate k's token
    at position j (of the distribution renormalised over the allowed tokens) and
    support_mask marks the distinct allowed tokens at j, each once; a position with one
    allowed token (a forced token) has KL 0. The authors' full-vocabulary version is this
    with K = V (every vocabulary entry once, all of them allowed). The teacher is a
    constant (stop-gradient). Entries off the support are zeroed first (garbage there
    changes nothing); a supported entry with p_T = 0 contributes 0.

    Args:
      teacher_logp_all: [..., K, A] float, log pi_T(c_{k,j} | x, Phi, y_<j).
      student_logp_all: [..., K, A] float, log pi_theta(c_{k,j} | x, y_<j) (differentiated).
      support_mask: [..., K, A] bool.
    Returns:
      [..., A] float, KL per position (>= 0 when both are distributions on the support).
    """
    chex.assert_equal_shape([teacher_logp_all, student_logp_all, support_mask])
    chex.assert_type([teacher_logp_all, student_logp_all, support_mask],
                     [float, float, bool])
    if support_mask.ndim < 2:
        raise ValueError(f"forward_kl needs [..., K, A] inputs, got rank {support_mask.ndim}")
    log_t = jax.lax.stop_gradient(jnp.where(support_mask, teacher_logp_all, 0.0))
    p_t = jnp.where(support_mask, jnp.exp(log_t), 0.0)
    on = p_t > 0  # supported entries the teacher gives mass (0 * log 0 = 0)
    log_t = jnp.where(on, log_t, 0.0)
    log_s = jnp.where(on, student_logp_all, 0.0)
    terms = jnp.where(on, p_t * (log_t - log_s), 0.0)  # p_T (log p_T - log p_theta)
    return jnp.sum(terms, axis=-2)
