"""APM: action-mean preserving token weights (docs/methods.md, FACTOR > APM), and the
weights of its ablations (docs/methods.md, FACTOR > Ablations).

From per-token scores s_{t,j} (HTA) to weights omega_{t,j} whose mean over the L_t real
tokens of each action is exactly 1, so that C_{t,j} = A*_t * omega_{t,j} keeps
mean_j C_{t,j} = A*_t. Shapes: [B, T, A] per token (any leading shape [..., A] works).
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple, Union

import chex
import jax
import jax.numpy as jnp

from factor_jax._checks import check_choice, check_range, is_static_number

TRANSFORMS = ("exp", "softplus")

# log u is floored at this value below the action's largest log u, so every real token
# keeps a strictly positive weight (hence sign(C) = sign(A*) on every real token) and the
# clipped renormalisation below always has a solution. It changes nothing unless two
# tokens of one action have scores more than 60 * tau apart.
LOG_FLOOR = -60.0
# The unnormalised ablation (unnormalised_weights) returns u itself: log u is clamped to [-30, 30] there so it
# stays finite and positive in float32.
MAX_LOG_U = 30.0
# Bisection steps on log c for the clipped renormalisation: the bracket is at most
# 60 + log L_t wide, so 32 halvings reach float32 resolution of c (the closed-form step
# after it makes the mean exact).
CLIP_BISECTION_STEPS = 32
_BIG = 1e30
# Padding marker in the log domain: real log u are kept within [-_MAX_LOG, _MAX_LOG]
# (finite scores / tau beyond 1e37 are clamped there, far beyond any spread that escapes
# LOG_FLOOR), so a padded token sits at least 3e38 - 2e37 below its action's max and
# `_PAD_GAP` separates the two: rel + _PAD_GAP > LOG_FLOOR on every real token,
# < -1.9e38 on every padded one.
_MAX_LOG = 1e37
_NEG = -3e38
_PAD_GAP = 1e38

Transform = Union[str, Callable[[chex.Array], chex.Array]]


def log_transform(z: chex.Array, transform: Transform = "exp") -> chex.Array:
    """log u for u = transform(z), computed stably.

      "exp":      u = exp(z),            log u = z
      "softplus": u = log(1 + exp(z)),   log u = log softplus(z)  (= z - O(e^z) for z < -20)
      callable:   u = transform(z) >= 0, log u = log transform(z) (-inf where u = 0)
    """
    check_choice("transform", transform, TRANSFORMS, allow_callable=True)
    if callable(transform):
        return jnp.log(transform(z))
    if transform == "exp":
        return z
    small = z < -20.0
    z_safe = jnp.where(small, 0.0, z)  # keeps the untaken branch finite
    return jnp.where(small, z, jnp.log(jax.nn.softplus(z_safe)))


def _padded_log_u(scores, token_mask, tau, transform):
    """log u on real tokens (+-inf -> +-_BIG, then within +-_MAX_LOG), _NEG at padding.

    One elementwise pass; the mask is read here only, so the per-action reductions that
    follow need no mask (they fuse into one pass over this array)."""
    z = jnp.where(token_mask, scores, 0.0) / tau  # padding never enters
    # +-inf (overflowing s / tau, or u = 0 from a callable) -> +-_BIG: an action whose u are
    # all 0 becomes uniform, a u = 0 among positive ones gets the floor.
    log_u = jnp.nan_to_num(log_transform(z, transform), posinf=_BIG, neginf=-_BIG)
    return jnp.where(token_mask, jnp.clip(log_u, -_MAX_LOG, _MAX_LOG), _NEG)


def _masked_max(x: chex.Array, mask: chex.Array) -> chex.Array:
    """max_j over real tokens, keepdims; 0 for an action with no finite real entry."""
    mx = jnp.max(jnp.where(mask, x, -jnp.inf), axis=-1, keepdims=True)
    return jnp.where(jnp.isfinite(mx), mx, 0.0)


def clip_renormalise(weights: chex.Array, token_mask: chex.Array, lo: float,
                     hi: Optional[float], steps: int = CLIP_BISECTION_STEPS) -> chex.Array:
    """Clips mean-1 weights to [lo, hi] and renormalises them to mean exactly 1 again.

    Finds the scale c > 0 with  (1/L_t) sum_j clip(c * omega_{t,j}, lo, hi) = 1,
    returned weights omega'_{t,j} = clip(c * omega_{t,j}, lo, hi). The left side is
    continuous and non-decreasing in log c, <= 1 at c = 1/max_j omega and >= 1 at
    c = 1/min_j omega, so c exists whenever lo <= 1 <= hi (and omega > 0). It is found by
    `steps` bisection steps on log c (per action: one exp per action, not per token); then,
    with the clipped set fixed, the scale of the unclipped tokens is solved in closed form,
      c_free = (L_t - lo * n_lo - hi * n_hi) / sum_{j unclipped} c omega_{t,j},
    and a final multiplicative renormalisation omega' *= L_t / sum_j omega' removes the
    rounding left. Guarantees: mean_j omega' = 1 up to float rounding (~1e-6 relative),
    lo <= omega' <= hi up to float rounding, token order and the ratios between unclipped
    tokens are kept. (A fixed number of clip-renormalise rounds, the simpler scheme, can
    stop outside [lo, hi]; this converges to its fixed point.)

    Args:
      weights: [..., A] float, mean-1 weights, > 0 on real tokens (>= ~1e-27 as produced
        by apm_weights, so c * omega stays finite in float32).
      token_mask: [..., A] bool.
      lo, hi: bounds with 0 <= lo <= 1 <= hi (hi None: no upper bound).
      steps: bisection steps (static).
    Returns:
      [..., A] clipped weights with mean 1 over each action's real tokens, 0 at padding.
    """
    chex.assert_equal_shape([weights, token_mask])
    hi = jnp.inf if hi is None else hi
    m = token_mask.astype(weights.dtype)
    length = jnp.sum(m, axis=-1, keepdims=True)  # L_t
    w = jnp.where(token_mask, weights, 0.0)
    log_w = jnp.log(jnp.where(token_mask, w, 1.0))

    def clipped_sum(k):
        return jnp.sum(m * jnp.clip(w * jnp.exp(k), lo, hi), axis=-1, keepdims=True)

    k_low = -_masked_max(log_w, token_mask)  # every c * omega <= 1: mean <= 1
    k_high = _masked_max(-log_w, token_mask)  # every c * omega >= 1: mean >= 1

    def bisect(_, bracket):
        k_a, k_b = bracket
        k_mid = 0.5 * (k_a + k_b)
        below = clipped_sum(k_mid) < length
        return jnp.where(below, k_mid, k_a), jnp.where(below, k_b, k_mid)

    k_low, k_high = jax.lax.fori_loop(0, steps, bisect, (k_low, k_high))
    x = w * jnp.exp(0.5 * (k_low + k_high))  # c * omega
    at_hi = token_mask & (x >= hi)
    at_lo = token_mask & (x <= lo) & ~at_hi
    free = token_mask & ~at_hi & ~at_lo
    fixed_mass = jnp.sum(jnp.where(at_hi, hi, 0.0) + jnp.where(at_lo, lo, 0.0),
                         axis=-1, keepdims=True)
    free_mass = jnp.sum(jnp.where(free, x, 0.0), axis=-1, keepdims=True)
    c_free = jnp.where(free_mass > 0, (length - fixed_mass) / jnp.where(free_mass > 0,
                                                                         free_mass, 1.0), 1.0)
    omega = jnp.where(at_hi, hi, jnp.where(at_lo, lo, x * c_free))
    omega = jnp.where(token_mask, omega, 0.0)
    total = jnp.sum(omega, axis=-1, keepdims=True)
    return omega * length / jnp.where(total > 0, total, 1.0)  # final mean-1 renormalisation


def _check_clip(clip):
    if clip is None:
        return None
    if not (isinstance(clip, (tuple, list)) and len(clip) == 2):
        raise ValueError(f"clip must be None or a pair (lo, hi) with 0 <= lo <= 1 <= hi, "
                         f"got {clip!r}")
    lo, hi = clip
    lo = 0.0 if lo is None else lo
    ok_lo = not is_static_number(lo) or 0.0 <= lo <= 1.0
    ok_hi = hi is None or not is_static_number(hi) or hi >= 1.0
    if not (ok_lo and ok_hi):
        raise ValueError(f"clip must be None or a pair (lo, hi) with 0 <= lo <= 1 <= hi, "
                         f"got {clip!r}")
    return lo, hi


def _checked_scores(scores, token_mask, tau, transform):
    """Shape / type / range checks shared by the weight functions; scores as constants."""
    chex.assert_equal_shape([scores, token_mask])
    chex.assert_type([scores, token_mask], [float, bool])
    check_choice("transform", transform, TRANSFORMS, allow_callable=True)
    check_range("tau", tau, lo=0.0, lo_open=True)
    return jax.lax.stop_gradient(scores)


def _shifted_u(scores, token_mask, tau, transform):
    """(e, denom): e_{t,j} = u_{t,j} / max_j u_{t,j} (floored, 0 at padding) [..., A] and
    denom = max(sum_j e_{t,j}, 1) [..., 1], so that u / sum_j u = e / denom.

    Written so XLA computes it in one fused pass over the [..., A] log u (max, exp, sum
    and the consumer's scaling together), with no mask inside that pass:
      rel_{t,j} = log u_{t,j} - max_j log u_{t,j}        (_NEG at padding: rel < -2.9e38)
      e_{t,j}   = exp(max(rel, min(LOG_FLOOR, rel + _PAD_GAP)))
                = exp(max(rel, LOG_FLOOR)) on real tokens,  exp(rel) = 0 at padding.
    An action with no real token has max = _NEG, e = 1 on its padding and L_t = 0; every
    caller multiplies e by L_t or masks it, so its weights are 0."""
    log_u = _padded_log_u(scores, token_mask, tau, transform)
    rel = log_u - jnp.max(log_u, axis=-1, keepdims=True)
    e = jnp.exp(jnp.maximum(rel, jnp.minimum(LOG_FLOOR, rel + _PAD_GAP)))
    return e, jnp.maximum(jnp.sum(e, axis=-1, keepdims=True), 1.0)


def _num_tokens(token_mask, dtype):
    """L_t = sum_j token_mask [..., 1], reduced in int32 (one pass over the bool mask)."""
    return jnp.sum(token_mask, axis=-1, keepdims=True, dtype=jnp.int32).astype(dtype)


def apm_weights(scores: chex.Array, token_mask: chex.Array, tau: float = 1.0,
                transform: Transform = "exp",
                clip: Optional[Tuple[Optional[float], Optional[float]]] = None) -> chex.Array:
    """APM: token weights from hindsight scores, action-mean preserving
    (docs/methods.md, FACTOR > APM).

      u_{t,j}     = exp(s_{t,j} / tau)   (transform="exp"; "softplus" or any callable
                                          non-negative map also works)
      omega_{t,j} = L_t * u_{t,j} / sum_j u_{t,j}     =>  (1/L_t) sum_j omega_{t,j} = 1

    computed in the log domain as L_t * softmax_j(log u) after subtracting the per-action
    max, with log u floored at LOG_FLOOR below that max (every real token keeps a
    positive weight, so sign(C) = sign(A*)). An action whose u are all 0 (callable
    transform) gets omega = 1. A one-token action gets omega = 1; padding gets 0 and never
    changes the real tokens' weights.

    clip=(lo, hi), 0 <= lo <= 1 <= hi: omega' = clip(c * omega, lo, hi) with the scale c
    chosen so that the mean is again exactly 1 (see `clip_renormalise`; bisection plus a
    closed-form step and a final renormalisation; lo <= omega' <= hi up to rounding).
    With lo > 0 weights stay positive; with lo = 0 a token can get exactly 0 when the
    tokens clipped at hi already carry the whole mass L_t.

    The ablations of APM are separate functions: `softmax_weights` (sum to 1) and
    `unnormalised_weights` (u itself).

    Args:
      scores: [..., A] float, s_{t,j} (HTA scores).
      token_mask: [..., A] bool, real action tokens.
      tau: temperature > 0.
      transform: "exp", "softplus" or a callable non-negative map.
      clip: None or (lo, hi).
    Returns:
      [..., A] weights omega (constants: stop-gradient), 0 at padding.
    """
    scores = _checked_scores(scores, token_mask, tau, transform)
    clip = _check_clip(clip)
    e, denom = _shifted_u(scores, token_mask, tau, transform)
    length = _num_tokens(token_mask, scores.dtype)
    omega = e * (length / denom)  # omega = L_t * u / sum_j u  (0 at padding: e or L_t is)
    if clip is None:
        return omega
    return clip_renormalise(omega, token_mask, *clip)


def softmax_weights(scores: chex.Array, token_mask: chex.Array, tau: float = 1.0,
                    transform: Transform = "exp") -> chex.Array:
    """The "without APM" ablation (docs/methods.md, FACTOR > Ablations): weights that sum
    to 1 over each action instead of averaging 1, shrinking its credit by 1/L_t.

      omega_{t,j} = u_{t,j} / sum_j u_{t,j}   =>  |(1/L_t) sum_j omega_{t,j} - 1| = 1 - 1/L_t

    Same u, log-domain shift and floor as `apm_weights`. Args as apm_weights (no clip).
    Returns [..., A] weights (stop-gradient), 0 at padding.
    """
    scores = _checked_scores(scores, token_mask, tau, transform)
    e, denom = _shifted_u(scores, token_mask, tau, transform)
    return jnp.where(token_mask, e / denom, 0.0)  # u / sum_j u


def unnormalised_weights(scores: chex.Array, token_mask: chex.Array, tau: float = 1.0,
                         transform: Transform = "exp") -> chex.Array:
    """Ablation: u_{t,j} = transform(s_{t,j} / tau) itself, no normalisation; log u is
    clamped to [-MAX_LOG_U, MAX_LOG_U] so u stays finite and positive in float32.

    Args as apm_weights (no clip). Returns [..., A] weights (stop-gradient), 0 at padding.
    """
    scores = _checked_scores(scores, token_mask, tau, transform)
    z = jnp.where(token_mask, scores, 0.0) / tau
    log_u = jnp.clip(log_transform(z, transform), -MAX_LOG_U, MAX_LOG_U)
    return jnp.where(token_mask, jnp.exp(log_u), 0.0)  # u itself


def uniform_weights(token_mask: chex.Array, dtype=jnp.float32) -> chex.Array:
    """omega = 1 on real tokens, 0 at padding: the "without HTA" ablation
    (docs/methods.md, FACTOR > Ablations). [..., A]."""
    return token_mask.astype(dtype)
