"""ASCT's credit kernel: the searched Q table -> the advantage of the taken action.

The paper's (arXiv 2609.35215, Eqs. 3-4): `policy_weighted_advantage`, a pure array
kernel (docs/methods.md, ASCT > Credit); asct_jax.search.methods builds the credit
methods (asct_uniform, asct_uct, asct_agentuct, asct_actor_rollout) from it.
"""
from __future__ import annotations

import chex
import jax.numpy as jnp


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
