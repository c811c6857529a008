"""HTA: the hindsight teacher's token scores (docs/methods.md, FACTOR > HTA).

A frozen teacher (pi_old) reads action a_t *with* the post-action feedback o_{t+1} in its
context and scores every action token; the student score is the same token without
hindsight. Shapes: [B, T, A] per token, [B, T] per action.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from factor_jax._checks import check_range


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


def hta_scores(delta: chex.Array, credit: chex.Array, mask: chex.Array,
               clip_d: float = 3.0) -> chex.Array:
    """Sign-aware clipped hindsight scores, as the authors compute them (their Eq. 6):

      s_{t,j} = sign(A*_t) * clip(delta_{t,j}, -d, d)

    Positive credit goes to the tokens the hindsight teacher likes more; negative credit
    (blame) to the tokens it likes less; an action with A*_t = 0 scores 0.

    Args:
      delta: [B, T, A] float, log pi_T - log pi_old per token (`hindsight_delta`).
      credit: [B, T] float, A*_t (only its sign is used).
      mask: [B, T, A] bool, the tokens to score.
      clip_d: the clip bound d > 0 on delta.
    Returns:
      [B, T, A] scores (stop-gradient), 0 off the mask.
    """
    chex.assert_rank([delta, credit, mask], [3, 2, 3])
    chex.assert_type([delta, credit, mask], [float, float, bool])
    chex.assert_equal_shape([delta, mask])
    chex.assert_equal_shape_prefix([delta, credit], 2)
    check_range("clip_d", clip_d, lo=0.0, lo_open=True)
    sign = jnp.sign(jax.lax.stop_gradient(credit))[..., None].astype(delta.dtype)
    s = sign * jnp.clip(delta, -clip_d, clip_d)  # s = sign(A*) * clip(delta, -d, d)
    return jax.lax.stop_gradient(jnp.where(mask, s, 0.0))
