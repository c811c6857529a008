"""FACTOR's policy loss and its hindsight distillation term, as the authors' trainer
computes them (FACTORTrainer.ppo_update: its two surrogate branches and its forward-KL
term). Shapes: [B, T, A] per token; masks bool. Padding is zeroed before any arithmetic,
so garbage (even inf / nan) there changes nothing.
"""
from __future__ import annotations

from typing import Dict

import chex
import jax
import jax.numpy as jnp

from asct_jax.rl import losses as rl_losses
from factor_jax._checks import check_range


def _zero_pad(token_mask, *xs):
    return tuple(jnp.where(token_mask, x, 0.0) for x in xs)


def factor_policy_loss(logp: chex.Array, logp_old: chex.Array, coef: chex.Array,
                       a_seq: chex.Array, action_mask: chex.Array,
                       nonaction_mask: chex.Array, clip_eps: float
                       ) -> Dict[str, chex.Array]:
    """FACTOR's two reward-weighted terms as the authors' trainer aggregates them
    (FACTORTrainer.ppo_update), with q_{t,j} = pi_theta(y_{t,j}) / pi_old(y_{t,j}):

      L_act    = -(1 / N_act) sum_{actions (i,t)} (1/L_t) sum_{j in action} min(q C, clip(q) C)
      L_nonact = -(1 / N_non) sum_{non-action tokens} min(q A_seq, clip(q) A_seq)

    clip(q) = clip(q, 1 - eps, 1 + eps); an action is a turn (i, t) with at least one
    action_mask token (L_t of them) and N_act counts them over the whole batch; N_non
    counts the non-action (reasoning / format) response tokens over the batch, and each
    carries its episode's A_seq. Each term is 0 when there is nothing to average. At q = 1
    L_act = -(mean over actions of the action-mean of C) (= -mean_t A*_t for APM
    weights). The full objective adds lambda_k * kl_token_mean(forward_kl(...)).

    Every input is zeroed off its mask before any arithmetic, so garbage (inf / nan) in
    padding reaches neither the values nor the gradients. Aggregation is over this call's
    batch: call it on the whole batch (the authors run one PPO epoch, one batch).

    Args:
      logp: [B, T, A] float, log pi_theta per token (differentiated).
      logp_old: [B, T, A] float, log pi_old per token.
      coef: [B, T, A] float, C_{t,j} = omega_{t,j} A*_t on action tokens (a constant).
      a_seq: [B] float, A_seq per episode (a constant).
      action_mask: [B, T, A] bool, the action tokens.
      nonaction_mask: [B, T, A] bool, the non-action response tokens.
      clip_eps: PPO clip epsilon > 0.
    Returns:
      {"act": L_act [], "nonact": L_nonact [] (both to minimise), and the metrics
       (stop-gradient) "clip_frac" (share of live tokens with |q - 1| > eps), "approx_kl"
       (k3 estimate of KL(pi_old || pi_theta), token mean), "num_actions" (N_act),
       "num_nonact_tokens" (N_non)}.
    """
    chex.assert_rank([logp, logp_old, coef, a_seq, action_mask, nonaction_mask],
                     [3, 3, 3, 1, 3, 3])
    chex.assert_type([logp, logp_old, coef, a_seq, action_mask, nonaction_mask],
                     [float, float, float, float, bool, bool])
    chex.assert_equal_shape([logp, logp_old, coef, action_mask, nonaction_mask])
    chex.assert_equal_shape_prefix([logp, a_seq], 1)
    check_range("clip_eps", clip_eps, lo=0.0, lo_open=True)
    sg = jax.lax.stop_gradient
    live = action_mask | nonaction_mask
    logp, logp_old = _zero_pad(live, logp, logp_old)
    coef = sg(jnp.where(action_mask, coef, 0.0))
    adv = sg(jnp.where(nonaction_mask, a_seq[:, None, None], 0.0))  # A_seq on its tokens
    log_q = logp - logp_old  # 0 off the masks
    q = jnp.exp(log_q)  # q = pi_theta / pi_old
    q_clip = jnp.clip(q, 1.0 - clip_eps, 1.0 + clip_eps)

    m_act = action_mask.astype(logp.dtype)
    surr = jnp.minimum(q * coef, q_clip * coef)  # min(q C, clip(q) C)
    length = jnp.sum(m_act, axis=-1)  # L_t
    per_action = jnp.sum(m_act * surr, axis=-1) / jnp.maximum(length, 1.0)
    is_action = (length > 0).astype(logp.dtype)
    num_actions = jnp.sum(is_action)
    loss_act = -jnp.sum(is_action * per_action) / jnp.maximum(num_actions, 1.0)

    m_non = nonaction_mask.astype(logp.dtype)
    surr_non = jnp.minimum(q * adv, q_clip * adv)  # min(q A_seq, clip(q) A_seq)
    num_non = jnp.sum(m_non)
    loss_non = -jnp.sum(m_non * surr_non) / jnp.maximum(num_non, 1.0)

    m_live = live.astype(logp.dtype)
    n_live = jnp.maximum(jnp.sum(m_live), 1.0)
    clipped = (jnp.abs(q - 1.0) > clip_eps).astype(logp.dtype)
    return {
        "act": loss_act,
        "nonact": loss_non,
        "clip_frac": sg(jnp.sum(m_live * clipped) / n_live),
        "approx_kl": sg(jnp.sum(m_live * ((q - 1.0) - log_q)) / n_live),
        "num_actions": sg(num_actions),
        "num_nonact_tokens": sg(num_non),
    }


# forward_kl (the per-position KL of the distillation term) lives in the substrate's
# losses, where the policies' passes compute it (TokenOutputs.kl); re-exported here.
forward_kl = rl_losses.forward_kl


def kl_token_mean(kl: chex.Array, action_mask: chex.Array) -> chex.Array:
    """L_kl = (1 / #action tokens) sum over action tokens of kl (0 if none): the authors'
    batch token-mean of the distillation KL (FACTORTrainer.ppo_update).

    Args:
      kl: [B, T, A] float, per-token KL (forward_kl).
      action_mask: [B, T, A] bool.
    Returns:
      [] float.
    """
    chex.assert_rank([kl, action_mask], 3)
    chex.assert_type([kl, action_mask], [float, bool])
    chex.assert_equal_shape([kl, action_mask])
    total = jnp.sum(jnp.where(action_mask, kl, 0.0))
    return total / jnp.maximum(jnp.sum(action_mask, dtype=jnp.int32), 1).astype(kl.dtype)
