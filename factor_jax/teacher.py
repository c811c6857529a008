"""The hindsight teacher (docs/methods.md, FACTOR > HTA): the policy's parameters reading
x_t with the feedback o_{t+1} after it,

    [x_t | feedback header | o_{t+1} | feedback footer | action header | y_t],

through the policy's generic passes (token_log_probs, distributions) over that prefix.
FACTOR's teacher is pi_old (the step's parameters); SERL's, a copy of the policy re-synced
every few steps. FACTOR's KL to the teacher is a reduction of the update's own pass
(`kl_reduce`, an asct_jax.rl.credit.DistReduce).

Shapes: B episodes, T turns, A action tokens, K candidates, N = B T rows.
"""
from __future__ import annotations

import jax.numpy as jnp

from asct_jax.rl.credit import CreditContext, DistReduce
from asct_jax.rl.policy import pads_to_right
from asct_jax.rl.types import Rollout, policy_inputs
from asct_jax.rl.types import merge_batch_turns as _flat
from factor_jax.losses import forward_kl

TEACHER_DIST = "teacher_dist"   # the key of the teacher's distributions in loss_inputs


def teacher_prefix(policy, obs, feedback):
    """[obs | feedback header | feedback | feedback footer] [N, O + F + ...] with its PAD
    moved right (the policy's pass left-aligns a prefix): obs [N, O], feedback [N, F]."""
    n, p = obs.shape[0], policy.prompt
    ids = lambda x: jnp.broadcast_to(jnp.asarray(x, obs.dtype), (n, len(x)))  # noqa: E731
    return pads_to_right(jnp.concatenate(
        [obs, ids(p.feedback_header), feedback, ids(p.feedback_footer)], axis=1),
        policy.pad_id)


def _teacher_args(ctx: CreditContext, batch: Rollout):
    prefix = teacher_prefix(ctx.policy, _flat(policy_inputs(batch)), _flat(batch.feedback))
    return prefix, _flat(batch.responses), _flat(batch.cand_tokens), _flat(batch.cand_mask)


def teacher_outputs(ctx: CreditContext, params, batch: Rollout):
    """Hindsight teacher on the batch: (token log-probs [B, T, A] (0 on padding), its
    next-token distributions dist_logp, support in the policy's layout: [B, T, K, A]
    over the candidates; [B, T, R, V] and [B, T, 1, 1] for the generating actor)."""
    b, t = batch.turn_mask.shape
    logp, dist, support = ctx.policy.distributions(params, *_teacher_args(ctx, batch))
    shape = lambda x: x.reshape((b, t) + x.shape[1:])  # noqa: E731
    return jnp.where(batch.token_mask, shape(logp), 0.0), shape(dist), shape(support)


def teacher_log_probs(ctx: CreditContext, params, batch: Rollout):
    """Hindsight teacher log-probs [B, T, A] (0 on padding)."""
    b, t = batch.turn_mask.shape
    logp = ctx.policy.token_log_probs(params, *_teacher_args(ctx, batch))
    return jnp.where(batch.token_mask, logp.reshape(b, t, -1), 0.0)


def _kl_to_teacher(dist_logp, support, teacher_dist):
    """KL(pi_T || pi_theta) per position (forward_kl) of the pass's distributions."""
    return forward_kl(teacher_dist, dist_logp, support)


# The update's pass reduces its distributions to the per-token KL to the teacher's,
# which the credit put in loss_inputs[TEACHER_DIST] (chunk by chunk over a vocabulary).
kl_reduce = DistReduce(fn=_kl_to_teacher, inputs=lambda credit: credit.loss_inputs[TEACHER_DIST])
