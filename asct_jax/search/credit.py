"""ASCT credit kernels: centre the searched Q table, then advantage of the taken action.

docs/methods.md, ASCT > Centring and ASCT advantage. asct_jax.search.methods builds the
credit methods (asct_uniform, asct_uct, asct_agentuct) from them; here they are pure
array kernels.
"""
from __future__ import annotations

from typing import Optional, Tuple

import chex
import jax.numpy as jnp

CENTRE_MODES = ("logpi", "policy_mean", "none")


def centre_q(
    q: chex.Array,
    q_mask: chex.Array,
    logp_old: chex.Array,
    mode: str = "logpi",
    alpha: float = 1.0,
) -> chex.Array:
    """Centres searched action values by the frozen actor.

    Modes:
      "logpi" (default):   Q'(s,a) = Q(s,a) - alpha * log pi_old(a|s)
      "policy_mean":       Q'(s,a) = Q(s,a) - sum_{b visited} pi_old(b|s) Q(s,b)
                                               / sum_{b visited} pi_old(b|s)
                           (the pi_old-weighted mean over the actions with an estimate,
                           renormalised; 0 if no action was visited)
      "none":              Q'(s,a) = Q(s,a)

    Args:
      q: [..., K] f32 searched Q(s, a).
      q_mask: [..., K] bool, the entries that have an estimate (visited).
      logp_old: [..., K] f32 log pi_old(a|s) (-inf allowed where masked / illegal).
      mode: one of CENTRE_MODES.
      alpha: weight of log pi_old in "logpi".

    Returns:
      [..., K] f32 Q'; 0 where q_mask is False (those entries carry no estimate).
    """
    if mode not in CENTRE_MODES:
        raise ValueError(f"mode must be one of {CENTRE_MODES}, got {mode!r}")
    chex.assert_equal_shape([q, q_mask, logp_old])
    q = jnp.asarray(q, jnp.float32)
    mask = jnp.asarray(q_mask, bool)
    safe_logp = jnp.where(mask, logp_old, 0.0).astype(jnp.float32)
    if mode == "logpi":
        qc = q - alpha * safe_logp  # Q' = Q - alpha * log pi_old(a|s)
    elif mode == "policy_mean":
        w = jnp.where(mask, jnp.exp(safe_logp), 0.0)
        z = jnp.sum(w, axis=-1, keepdims=True)
        baseline = jnp.sum(w * jnp.where(mask, q, 0.0), axis=-1, keepdims=True)
        baseline = jnp.where(z > 0, baseline / jnp.where(z > 0, z, 1.0), 0.0)
        qc = q - baseline  # Q' = Q - sum_b pi_old(b|s) Q(s,b) / sum_b pi_old(b|s)
    else:
        qc = q
    return jnp.where(mask, qc, 0.0)


def asct_advantage(
    q_centred: chex.Array,
    q_mask: chex.Array,
    action_index: chex.Array,
    values: chex.Array,
    fallback: chex.Array,
    searched: chex.Array,
    turn_mask: Optional[chex.Array] = None,
) -> Tuple[chex.Array, chex.Array]:
    """A_t = Q'(s_t, a_t) - V_phi(s_t), with a fallback where there is no estimate.

    The taken action a_t has no searched estimate when the state was not searched
    (`searched` False: outside the per-episode budget, or the state / action is not
    restorable), when a_t is not among the candidates (action_index < 0), or when the
    search never visited a_t (q_mask False; non-restorable actions are never visited).
    Then the credit is `fallback`, which the caller sets to the trajectory-return
    advantage (a step that cannot be searched from falls back to the trajectory
    return), and the step is counted in `used_fallback`. Note the two
    advantages live on the same return scale but have different baselines (V_phi vs the
    caller's return baseline).

    Args:
      q_centred: [B, T, K] f32, Q' from `centre_q`.
      q_mask: [B, T, K] bool.
      action_index: [B, T] i32, index of the taken action among the candidates (-1: none).
      values: [B, T] f32, V_phi(s_t).
      fallback: [B, T] f32, the advantage used where there is no estimate.
      searched: [B, T] bool, a search was run at s_t.
      turn_mask: optional [B, T] bool; where False (turn did not happen) adv = 0 and no
        fallback is counted.

    Returns:
      adv [B, T] f32, used_fallback [B, T] bool.
    """
    chex.assert_rank([q_centred, q_mask], 3)
    chex.assert_equal_shape([q_centred, q_mask])
    b, t, k = q_centred.shape
    chex.assert_shape([action_index, values, fallback, searched], (b, t))
    chex.assert_type(action_index, int)
    idx = jnp.clip(action_index, 0, k - 1)[..., None]
    q_taken = jnp.take_along_axis(q_centred, idx, axis=-1)[..., 0]
    has_q = jnp.take_along_axis(q_mask, idx, axis=-1)[..., 0]
    has_q = has_q & searched & (action_index >= 0)
    adv = jnp.where(has_q, q_taken - values, fallback)  # A_t = Q'(s_t, a_t) - V(s_t)
    used_fallback = ~has_q
    if turn_mask is not None:
        chex.assert_shape(turn_mask, (b, t))
        adv = jnp.where(turn_mask, adv, 0.0)
        used_fallback = used_fallback & turn_mask
    return adv.astype(jnp.float32), used_fallback
