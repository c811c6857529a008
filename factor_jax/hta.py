"""HTA: hindsight-teacher token allocation scores (docs/methods.md, FACTOR > HTA).

A frozen teacher (pi_old) reads action a_t *with* the post-action feedback o_{t+1} in its
context and scores every action token; the student score is the same token without
hindsight. Shapes: [B, T, A] per token, [B, T] per action.
"""
from __future__ import annotations

from typing import Tuple, Union

import chex
import jax
import jax.numpy as jnp

from factor_jax._checks import check_range


def choice_tokens(actions: chex.Array, cand_tokens: chex.Array, cand_mask: chex.Array,
                  token_mask: chex.Array) -> chex.Array:
    """The action tokens at which the actor had a choice under constrained decoding.

    Token j of action y is a choice iff a legal candidate that agrees with y on y_{<j}
    has another token at j:

      choice_j = OR_k [ legal_k  AND  c_{k,<j} = y_{<j}  AND  c_{k,j} != y_j ]

    Elsewhere the constraint leaves one continuation, so log pi(y_j | x, y_<j) = 0 for
    every parameter (no gradient) and delta_j = 0 whatever the teacher reads: such a
    *forced* token cannot carry credit, and HTA + APM allocate over the choice tokens
    only (docs/methods.md, FACTOR > HTA; a free-form LLM action has no forced tokens).

    Args:
      actions: [..., A] int, the action's tokens (EOS then PAD).
      cand_tokens: [..., K, A] int, the candidates it was chosen from.
      cand_mask: [..., K] bool, legal candidates.
      token_mask: [..., A] bool, real action tokens.
    Returns:
      [..., A] bool, a subset of token_mask.
    """
    chex.assert_rank([actions, token_mask], cand_mask.ndim)
    chex.assert_rank(cand_tokens, actions.ndim + 1)
    chex.assert_equal_shape([actions, token_mask])
    chex.assert_equal_shape_prefix([cand_tokens, cand_mask], cand_mask.ndim)
    same = cand_tokens == actions[..., None, :]                        # [..., K, A]
    # c_{k,<j} = y_{<j}: an exclusive running AND along the tokens.
    prefix = jnp.cumprod(jnp.concatenate(
        [jnp.ones_like(same[..., :1]), same[..., :-1]], axis=-1), axis=-1).astype(bool)
    other = cand_mask[..., None] & prefix & ~same
    return jnp.any(other, axis=-2) & token_mask


def hindsight_delta(teacher_logp: chex.Array, student_logp: chex.Array,
                    token_mask: chex.Array) -> chex.Array:
    """Per-token hindsight log-ratio.

      delta_{t,j} = log pi_T(y_{t,j} | x_t, o_{t+1}, y_{t,<j}) - log pi_S(y_{t,j} | x_t, y_{t,<j})

    Args:
      teacher_logp, student_logp: [B, T, A] float.
      token_mask: [B, T, A] bool, real action tokens.
    Returns:
      [B, T, A] delta (a constant: stop-gradient), 0 at padding.
    """
    chex.assert_rank([teacher_logp, student_logp, token_mask], 3)
    chex.assert_type([teacher_logp, student_logp, token_mask], [float, float, bool])
    chex.assert_equal_shape([teacher_logp, student_logp, token_mask])
    delta = jnp.where(token_mask, teacher_logp, 0.0) - jnp.where(token_mask, student_logp, 0.0)
    return jax.lax.stop_gradient(delta)


def sign_aware_scores(delta: chex.Array, credit: chex.Array,
                      token_mask: chex.Array) -> chex.Array:
    """s_{t,j} = sign(A*_t) * delta_{t,j}; 0 at padding, and 0 on actions with A*_t = 0.

    Positive credit goes to the tokens the hindsight teacher likes more; negative credit
    (blame) to the tokens it likes less.

    Args:
      delta: [B, T, A] float. credit: [B, T] float, A*_t. token_mask: [B, T, A] bool.
    Returns:
      [B, T, A] scores (stop-gradient).
    """
    chex.assert_rank([delta, credit, token_mask], [3, 2, 3])
    chex.assert_type([delta, credit, token_mask], [float, float, bool])
    chex.assert_equal_shape([delta, token_mask])
    chex.assert_equal_shape_prefix([delta, credit], 2)
    sign = jnp.sign(jax.lax.stop_gradient(credit))[..., None].astype(delta.dtype)
    return jnp.where(token_mask, sign * delta, 0.0)  # s = sign(A*) * delta


def hta_scores(teacher_logp: chex.Array, student_logp: chex.Array, credit: chex.Array,
               token_mask: chex.Array, return_delta: bool = False
               ) -> Union[chex.Array, Tuple[chex.Array, chex.Array]]:
    """Sign-aware hindsight scores s_{t,j} = sign(A*_t) * (log pi_T - log pi_S).

    Args:
      teacher_logp: [B, T, A] float, log pi_T(y_{t,j} | x_t, o_{t+1}, y_{t,<j}).
      student_logp: [B, T, A] float, log pi_S(y_{t,j} | x_t, y_{t,<j}) (pi_old's).
      credit: [B, T] float, A*_t (only its sign is used).
      token_mask: [B, T, A] bool, real action tokens.
      return_delta: also return delta (SERL and the diagnostics use it).
    Returns:
      scores [B, T, A] (0 at padding), or (scores, delta) when return_delta.
    """
    delta = hindsight_delta(teacher_logp, student_logp, token_mask)
    scores = sign_aware_scores(delta, credit, token_mask)
    return (scores, delta) if return_delta else scores


def hta_weights(delta: chex.Array, credit: chex.Array, mask: chex.Array, eta,
                tau: float = 1.0, clip_d: float = 3.0) -> chex.Array:
    """FACTOR's token weights as the authors compute them (their Eq. 6-7): clipped
    sign-aware scores, a softmax mixed with the uniform allocation, scaled to mean 1.

      s_{t,j}     = sign(A*_t) * clip(delta_{t,j}, -d, d)
      rho_{t,j}   = (1 - eta) / L_t + eta * softmax_j(s_{t,j} / tau)   (over the mask)
      omega_{t,j} = L_t * rho_{t,j}  =>  (1/L_t) sum_j omega_{t,j} = 1,  omega >= 1 - eta

    L_t = the number of mask tokens of action t. An action with A*_t = 0 (s = 0) or
    eta = 0 gets omega = 1 on its tokens; an action with no mask token gets 0. (Contrast
    `apm_weights`: the softmax alone, unclipped scores, no uniform floor.) The authors'
    schedule for eta is factor_jax.schedules.eta_schedule.

    Args:
      delta: [B, T, A] float, log pi_T - log pi_old per token (unclipped; see
        `hindsight_delta`).
      credit: [B, T] float, A*_t (only its sign is used).
      mask: [B, T, A] bool, the tokens to allocate over (the action's tokens; the choice
        tokens under constrained decoding).
      eta: mixing weight in [0, 1] (may be traced).
      tau: softmax temperature > 0.
      clip_d: the clip bound d > 0 on delta.
    Returns:
      [B, T, A] omega (constants: stop-gradient), 0 off the mask.
    """
    chex.assert_rank([delta, credit, mask], [3, 2, 3])
    chex.assert_type([delta, credit, mask], [float, float, bool])
    chex.assert_equal_shape([delta, mask])
    chex.assert_equal_shape_prefix([delta, credit], 2)
    check_range("eta", eta, lo=0.0, hi=1.0)
    check_range("tau", tau, lo=0.0, lo_open=True)
    check_range("clip_d", clip_d, lo=0.0, lo_open=True)
    delta = jax.lax.stop_gradient(jnp.where(mask, delta, 0.0))  # padding never enters
    sign = jnp.sign(jax.lax.stop_gradient(credit))[..., None].astype(delta.dtype)
    s = sign * jnp.clip(delta, -clip_d, clip_d)  # s = sign(A*) * clip(delta, -d, d)
    z = s / tau
    z_max = jnp.max(jnp.where(mask, z, -jnp.inf), axis=-1, keepdims=True)
    z_max = jnp.where(jnp.isfinite(z_max), z_max, 0.0)  # an action with no mask token
    e = jnp.where(mask, jnp.exp(z - z_max), 0.0)
    total = jnp.sum(e, axis=-1, keepdims=True)  # >= 1 on an action with a mask token
    length = jnp.sum(mask, axis=-1, keepdims=True, dtype=jnp.int32).astype(delta.dtype)
    soft = e / jnp.where(total > 0, total, 1.0)  # softmax_j(s / tau) over the mask
    eta = jnp.asarray(eta, delta.dtype)
    omega = (1.0 - eta) + eta * length * soft  # omega = L_t rho = (1 - eta) + eta L_t softmax
    return jax.lax.stop_gradient(jnp.where(mask, omega, 0.0))
