"""ASCT credit kernels: the searched Q table -> the advantage of the taken action.

The paper's (arXiv 2609.35215, Eqs. 3-4): `policy_weighted_advantage`. An earlier
blog-summary variant (centre_q then asct_advantage, which subtracts a critic) stays as
named options. docs/methods.md, ASCT > Credit. asct_jax.search.methods builds the
credit methods (asct_uniform, asct_uct, asct_agentuct) from them; here they are pure
array kernels.
"""
from __future__ import annotations

from typing import Optional, Tuple

import chex
import jax.numpy as jnp

# "policy_weighted": the paper's A = Q_hat(s, a_t) - sum_a pi_old(a|s) Q_hat(s, a), no critic
# (policy_weighted_advantage). The others are an earlier, blog-summary variant kept as
# named options: Q' = centre_q(Q, mode), then A = Q'(s, a_t) - V_phi(s) (asct_advantage).
CENTRE_MODES = ("policy_weighted", "logpi", "policy_mean", "none")


def policy_weighted_advantage(
    q_hat: chex.Array,
    q_mask: chex.Array,
    log_pi_old: chex.Array,
    taken: chex.Array,
    turn_mask: chex.Array,
    return_has: bool = False,
):
    """The ASCT paper's actor-centred credit (Eqs. 3-4), no critic:

      V_hat(s) = sum_a p_a Q_hat(s, a),   p_a = pi_old(a | s),
      A(s, a_t) = Q_hat(s, a_t) - V_hat(s).

    The sum runs over the actions with an estimate (q_mask); when every legal action was
    tried (B >= |A(s)|, the paper's root coverage) that is the whole legal set and the p_a
    sum to 1; otherwise the weights are renormalised over the tried actions. A turn gets 0
    where it is not real, its taken action has no estimate, or taken < 0.

    Args:
      q_hat: [B, T, K] f32, Q_hat(s_t, a): the mean utility of the trials starting with a.
      q_mask: [B, T, K] bool, a has an estimate at s_t.
      log_pi_old: [B, T, K] f32, log pi_old(a | s_t) (-inf allowed where illegal).
      taken: [B, T] int32, the index of the actor's sampled action a_t (-1: none).
      turn_mask: [B, T] bool, the real turns.
      return_has: also return the real turns whose taken action has an estimate.

    Returns:
      [B, T] f32 A(s_t, a_t); with return_has, (A, has [B, T] bool): q_mask at a_t,
      taken >= 0 and turn_mask (where has is False a caller may put a fallback credit).
    """
    chex.assert_rank([q_hat, q_mask, log_pi_old], 3)
    chex.assert_equal_shape([q_hat, q_mask, log_pi_old])
    b, t, k = q_hat.shape
    chex.assert_shape([taken, turn_mask], (b, t))
    mask = jnp.asarray(q_mask, bool)
    q = jnp.where(mask, q_hat, 0.0).astype(jnp.float32)
    p = jnp.where(mask, jnp.exp(jnp.where(mask, log_pi_old, 0.0)), 0.0)
    z = jnp.sum(p, axis=-1)
    v_hat = jnp.sum(p * q, axis=-1) / jnp.where(z > 0, z, 1.0)      # V_hat = sum_a p_a Q_hat
    idx = jnp.clip(taken, 0, k - 1)[..., None]
    q_taken = jnp.take_along_axis(q, idx, axis=-1)[..., 0]
    has = jnp.take_along_axis(mask, idx, axis=-1)[..., 0] & (taken >= 0) & turn_mask
    a = jnp.where(has & (z > 0), q_taken - v_hat, 0.0).astype(jnp.float32)  # Q_hat(a_t) - V_hat
    return (a, has) if return_has else a


def centre_q(
    q: chex.Array,
    q_mask: chex.Array,
    logp_old: chex.Array,
    mode: str = "logpi",
    alpha: float = 1.0,
) -> chex.Array:
    """Centres searched action values by the frozen actor.

    The earlier variant's centring (A = Q' - V_phi afterwards, asct_advantage); the paper's
    credit is `policy_weighted_advantage` (mode "policy_weighted" has no Q' form).

    Modes:
      "logpi":   Q'(s,a) = Q(s,a) - alpha * log pi_old(a|s)
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
    if mode not in CENTRE_MODES[1:]:
        raise ValueError(f"mode must be one of {CENTRE_MODES[1:]}, got {mode!r}")
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
