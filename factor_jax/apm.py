"""APM: action-mean preserving token weights (docs/methods.md, FACTOR > APM), and the
weights of its ablations (docs/methods.md, FACTOR > Ablations).

From per-token scores s_{t,j} (HTA, factor_jax.hta.hta_scores) to weights omega_{t,j}
whose mean over the L_t tokens of each action is exactly 1, so that C_{t,j} = A*_t omega_{t,j}
keeps mean_j C_{t,j} = A*_t. Shapes: [B, T, A] per token (any leading shape [..., A]
works for the ablations).
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from factor_jax._checks import check_range

# log u is floored at this value below the action's largest log u in `softmax_weights`,
# so every real token keeps a strictly positive weight (hence sign(C) = sign(A*)). It
# changes nothing unless two tokens of one action have scores more than 60 * tau apart.
LOG_FLOOR = -60.0
_BIG = 1e30
# Padding marker in the log domain: real log u are kept within [-_MAX_LOG, _MAX_LOG], so
# a padded token sits at least 3e38 - 2e37 below its action's max and `_PAD_GAP`
# separates the two: rel + _PAD_GAP > LOG_FLOOR on every real token, < -1.9e38 on every
# padded one.
_MAX_LOG = 1e37
_NEG = -3e38
_PAD_GAP = 1e38


def apm_weights(scores: chex.Array, mask: chex.Array, eta, tau: float = 1.0) -> chex.Array:
    """FACTOR's token weights as the authors compute them (their Eq. 7): a softmax of the
    HTA scores mixed with the uniform allocation, scaled to mean 1 over each action.

      rho_{t,j}   = (1 - eta) / L_t + eta * softmax_j(s_{t,j} / tau)   (over the mask)
      omega_{t,j} = L_t * rho_{t,j}  =>  (1/L_t) sum_j omega_{t,j} = 1,  omega >= 1 - eta

    L_t = the number of mask tokens of action t. An action with s = 0 (A*_t = 0) or
    eta = 0 gets omega = 1 on its tokens; an action with no mask token gets 0. The
    authors' schedule for eta is factor_jax.schedules.eta_schedule.

    Args:
      scores: [B, T, A] float, s_{t,j} (hta_scores; read on the mask only).
      mask: [B, T, A] bool, the tokens to allocate over (the action's tokens).
      eta: mixing weight in [0, 1] (may be traced).
      tau: softmax temperature > 0.
    Returns:
      [B, T, A] omega (constants: stop-gradient), 0 off the mask.
    """
    chex.assert_rank([scores, mask], 3)
    chex.assert_type([scores, mask], [float, bool])
    chex.assert_equal_shape([scores, mask])
    check_range("eta", eta, lo=0.0, hi=1.0)
    check_range("tau", tau, lo=0.0, lo_open=True)
    z = jax.lax.stop_gradient(scores) / tau
    z_max = jnp.max(jnp.where(mask, z, -jnp.inf), axis=-1, keepdims=True)
    z_max = jnp.where(jnp.isfinite(z_max), z_max, 0.0)  # an action with no mask token
    e = jnp.where(mask, jnp.exp(z - z_max), 0.0)
    total = jnp.sum(e, axis=-1, keepdims=True)  # >= 1 on an action with a mask token
    length = jnp.sum(mask, axis=-1, keepdims=True, dtype=jnp.int32).astype(scores.dtype)
    soft = e / jnp.where(total > 0, total, 1.0)  # softmax_j(s / tau) over the mask
    eta = jnp.asarray(eta, scores.dtype)
    omega = (1.0 - eta) + eta * length * soft  # omega = L_t rho = (1 - eta) + eta L_t softmax
    return jax.lax.stop_gradient(jnp.where(mask, omega, 0.0))


def softmax_weights(scores: chex.Array, token_mask: chex.Array,
                    tau: float = 1.0) -> chex.Array:
    """The "without APM" ablation (docs/methods.md, FACTOR > Ablations): weights that sum
    to 1 over each action instead of averaging 1, shrinking its credit by 1/L_t.

      omega_{t,j} = u_{t,j} / sum_j u_{t,j},  u = exp(s / tau)
                    =>  |(1/L_t) sum_j omega_{t,j} - 1| = 1 - 1/L_t

    Computed in the log domain after subtracting the per-action max, with log u floored
    at LOG_FLOOR below that max (every real token keeps a positive weight), in one fused
    pass with no mask inside it:
      rel_{t,j} = log u_{t,j} - max_j log u_{t,j}        (_NEG at padding: rel < -2.9e38)
      e_{t,j}   = exp(max(rel, min(LOG_FLOOR, rel + _PAD_GAP)))
                = exp(max(rel, LOG_FLOOR)) on real tokens,  exp(rel) = 0 at padding.

    Args:
      scores: [..., A] float, s_{t,j}. token_mask: [..., A] bool. tau: temperature > 0.
    Returns:
      [..., A] weights (stop-gradient), 0 at padding.
    """
    chex.assert_equal_shape([scores, token_mask])
    chex.assert_type([scores, token_mask], [float, bool])
    check_range("tau", tau, lo=0.0, lo_open=True)
    z = jnp.where(token_mask, jax.lax.stop_gradient(scores), 0.0) / tau  # padding never enters
    # +-inf (overflowing s / tau) -> +-_BIG, then within +-_MAX_LOG; _NEG at padding.
    log_u = jnp.nan_to_num(z, posinf=_BIG, neginf=-_BIG)
    log_u = jnp.where(token_mask, jnp.clip(log_u, -_MAX_LOG, _MAX_LOG), _NEG)
    rel = log_u - jnp.max(log_u, axis=-1, keepdims=True)
    e = jnp.exp(jnp.maximum(rel, jnp.minimum(LOG_FLOOR, rel + _PAD_GAP)))
    denom = jnp.maximum(jnp.sum(e, axis=-1, keepdims=True), 1.0)
    return jnp.where(token_mask, e / denom, 0.0)  # u / sum_j u


def uniform_weights(token_mask: chex.Array, dtype=jnp.float32) -> chex.Array:
    """omega = 1 on real tokens, 0 at padding: the "without HTA" ablation
    (docs/methods.md, FACTOR > Ablations). [..., A]."""
    return token_mask.astype(dtype)
