"""SERL (selective hindsight distillation, arXiv 2605.19447): the paper's main baseline,
as its authors' code computes it (OliverLeeXZ/SERL: verl/trainer/ppo/core_algos.py,
compute_serl_action_mask_reweighted_advantages and _serl_effective_lambda;
recipe/serl/privileged_context.py for which rows get a teacher prompt).

GRPO advantage per episode or per step sample, reweighted on action tokens only by the
hindsight teacher (reasoning / format tokens keep A), and only on the rows (turns) whose
teacher prompt got privileged context (SERL's serl_mask); no renormalisation to mean 1
(contrast with APM). Shapes: [B] per episode or [B, T] per turn, [B, T, A] per token.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from factor_jax._checks import check_range

SERL_CLAMP = 20.0  # |sign(A) * delta| is clamped to this before exp
SERL_WEIGHT_CLIP = 0.2  # w is clipped to [1 - 0.2, 1 + 0.2] (serl.weight_clip)


def _per_token(advantage: chex.Array) -> chex.Array:
    """[B] (one per episode) or [B, T] (one per turn) -> [B, 1, 1] or [B, T, 1]."""
    chex.assert_rank(advantage, {1, 2})
    return advantage.reshape(advantage.shape + (1,) * (3 - advantage.ndim))


def serl_token_weights(delta: chex.Array, advantage: chex.Array, action_mask: chex.Array,
                       lam, clip: float = SERL_WEIGHT_CLIP) -> chex.Array:
    """SERL's advantage multiplier per token:

      w_{t,j} = clip(exp(clip(sign(A) * delta_{t,j}, -20, 20)), 1 - clip, 1 + clip)
      m_{t,j} = (1 - lam) + lam * w_{t,j}   on action tokens,   1 elsewhere

    "Elsewhere" includes padding: callers multiply by their token mask (as SERL does with
    its response mask). m lies in [1 - lam * clip, 1 + lam * clip] on action tokens.

    Args:
      delta: [B, T, A] float, log pi_T - log pi_theta per token (a constant).
      advantage: [B] or [B, T] float, A (GRPO advantage of the episode or of the turn's
        step sample; only its sign is used).
      action_mask: [B, T, A] bool, the tokens SERL reweights (inside <action>...</action>
        of the samples that have a teacher prompt).
      lam: mixing weight in [0, 1] (serl_lambda; may be traced).
      clip: weight clip >= 0 (0.2 in SERL).
    Returns:
      [B, T, A] multiplier (stop-gradient).
    """
    chex.assert_rank([delta, advantage, action_mask], [3, {1, 2}, 3])
    chex.assert_type([delta, advantage, action_mask], [float, float, bool])
    chex.assert_equal_shape([delta, action_mask])
    chex.assert_equal_shape_prefix([advantage, delta], advantage.ndim)
    check_range("lam", lam, lo=0.0, hi=1.0)
    check_range("clip", clip, lo=0.0)
    sg = jax.lax.stop_gradient
    sign = jnp.sign(sg(_per_token(advantage))).astype(delta.dtype)
    x = jnp.clip(sign * sg(jnp.where(action_mask, delta, 0.0)), -SERL_CLAMP, SERL_CLAMP)
    w = jnp.clip(jnp.exp(x), 1.0 - clip, 1.0 + clip)  # w = clip(exp(clip(sign(A) delta)))
    blended = (1.0 - lam) + lam * w  # (1 - lam) + lam * w
    return sg(jnp.where(action_mask, blended, 1.0))


def serl_coefficients(advantage: chex.Array, delta: chex.Array, action_mask: chex.Array,
                      token_mask: chex.Array, lam,
                      clip: float = SERL_WEIGHT_CLIP) -> chex.Array:
    """SERL per-token coefficients C_{t,j} = sg(A * m_{t,j}) on the response tokens:
    A * ((1 - lam) + lam * w_{t,j}) on action tokens, A on the other tokens of token_mask,
    0 on padding (serl_token_weights gives m).

    No renormalisation: the action mean of C is not A in general (it lies in
    A * [1 - clip lam, 1 + clip lam]).

    Args:
      advantage: [B] or [B, T] float, GRPO advantage of each episode, or of each turn's
        step sample (R(tau_i) - p_{i,t} - mean) / (std + eps).
      delta: [B, T, A] float, hindsight log-ratio log pi_T - log pi_theta.
      action_mask: [B, T, A] bool, the reweighted tokens (a subset of token_mask).
      token_mask: [B, T, A] bool, every response token that enters the loss.
      lam: scalar in [0, 1] (see serl_lambda); may be traced.
      clip: weight clip >= 0 (0.2 in SERL).
    Returns:
      [B, T, A] coefficients (stop-gradient), 0 off token_mask.
    """
    chex.assert_type(token_mask, bool)
    chex.assert_equal_shape([delta, token_mask])
    mult = serl_token_weights(delta, advantage, action_mask & token_mask, lam, clip)
    coef = _per_token(advantage) * mult  # A * ((1 - lam) + lam w), A elsewhere
    return jax.lax.stop_gradient(jnp.where(token_mask, coef, 0.0))


def serl_prompted_rows(feedback: chex.Array, turn_mask: chex.Array, pad_id: int) -> chex.Array:
    """SERL's serl_mask: the turns whose teacher prompt got privileged context.

      mask_{i,t} = turn_mask_{i,t} and o_{t+1} has a token other than PAD

    In SERL's "immediate_feedback" sampling mode a step's feedback section is built only
    when the feedback text is not empty (privileged_context.py: _build_named_section
    returns None for empty text, and a row without a section keeps the student's prompt
    and gets serl_mask 0); only rows with serl_mask 1 are reweighted.

    Args:
      feedback: [B, T, F] int, o_{t+1} of each turn (pad_id-padded).
      turn_mask: [B, T] bool, real turns.
      pad_id: the padding id of the feedback.
    Returns:
      [B, T] bool.
    """
    chex.assert_rank([feedback, turn_mask], [3, 2])
    chex.assert_equal_shape_prefix([feedback, turn_mask], 2)
    return turn_mask & jnp.any(feedback != pad_id, axis=-1)


def serl_lambda(step, lam0: float = 0.5, decay_steps: int = 50) -> chex.Array:
    """SERL's mixing weight, decaying linearly from lam0 at the first update:

      lam_k = lam0 * max(0, 1 - (k - 1) / decay_steps),   k = 1, 2, ... (1-indexed step)

    (SERL's actor evaluates lam0 * max(0, 1 - u / decay) at its update counter u, which is
    0 during the first update and incremented after each; u = k - 1.) decay_steps = 0
    means no decay (lam_k = lam0), as in SERL; k < 1 is read as k = 1.

    Args:
      step: k, the 1-indexed training step (int or traced scalar); a 0-based counter
        passes step + 1.
      lam0: initial mixing weight in [0, 1] (serl.mixing_lambda, 0.5 in SERL).
      decay_steps: steps to reach 0 (int >= 0; serl.lambda_decay_steps, 50 in SERL).
    Returns:
      [] float32 lam.
    """
    check_range("lam0", lam0, lo=0.0, hi=1.0)
    check_range("decay_steps", decay_steps, lo=0.0)
    if decay_steps == 0:
        return jnp.asarray(lam0, jnp.float32)
    k = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
    frac = (k - 1.0) / jnp.asarray(decay_steps, jnp.float32)
    return (lam0 * jnp.clip(1.0 - frac, 0.0, 1.0)).astype(jnp.float32)  # lam0 max(0, 1 - (k-1)/d)
