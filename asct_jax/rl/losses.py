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
                      clip_eps: float, dual_clip: float = 0.0) -> chex.Array:
    """Per-token clipped PPO objective, negated, with verl's optional dual clip.

      rho = exp(logp - logp_old)
      l   = -min(rho * C, clip(rho, 1 - eps, 1 + eps) * C)
      l   = min(l, -c * C)   where C < 0, if dual_clip c > 1   (Ye et al. 2020; verl's
                             compute_policy_loss, clip_ratio_c = 3)

    Args:
      logp, logp_old, coef: [..., A] float32; coef is treated as a constant.
      dual_clip: c (0: off).
    Returns:
      [..., A] per-token loss.
    """
    chex.assert_equal_shape([logp, logp_old, coef])
    coef = jax.lax.stop_gradient(coef)
    rho = jnp.exp(logp - logp_old)
    unclipped = rho * coef
    clipped = jnp.clip(rho, 1.0 - clip_eps, 1.0 + clip_eps) * coef
    loss = -jnp.minimum(unclipped, clipped)
    if dual_clip:
        loss = jnp.where(coef < 0, jnp.minimum(loss, -dual_clip * coef), loss)
    return loss


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
                token_mask: chex.Array, clip_eps: float, mode: str = "token_mean",
                dual_clip: float = 0.0) -> Tuple[chex.Array, Dict[str, chex.Array]]:
    """Clipped surrogate (dual clip c if > 0) aggregated by `mode`, with PPO diagnostics.

    Returns (loss, metrics) with metrics clip_frac (the share of tokens whose ratio left
    [1 - eps, 1 + eps]) and approx_kl = E[(rho - 1) - log rho] (the k3 estimator of
    KL(pi_old || pi_theta)), both token means.
    """
    per_token = clipped_surrogate(logp, logp_old, coef, clip_eps, dual_clip)
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
               mode: str = "token_mean", clamp: float = 0.0) -> chex.Array:
    """KL(pi_theta || pi_ref) per token by the k3 estimator exp(r) - 1 - r, r = ref - theta,
    clamped to [-clamp, clamp] if clamp > 0 (verl's low_var_kl: clamp 10)."""
    r = logp_ref - logp
    k3 = jnp.exp(r) - 1.0 - r
    if clamp:
        k3 = jnp.clip(k3, -clamp, clamp)
    return aggregate(k3, token_mask, mode)


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
