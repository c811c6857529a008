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


def forward_kl(teacher_logp_all: chex.Array, student_logp_all: chex.Array,
               support_mask: chex.Array) -> chex.Array:
    """Per-token forward KL from the hindsight teacher to the policy over the allowed
    tokens of each position (the distillation term of FACTOR's objective, which the
    authors call SERL's action-only KL; compute_serl_action_kl in their factor/hta.py),
    reduced in the update's own pass (factor_jax.teacher.kl_reduce):

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
