"""The hindsight teacher's passes over a batch (docs/methods.md, FACTOR > HTA): the
policy's parameters reading [x_t | SEP o_{t+1} | y_t]. FACTOR's teacher is pi_old (the
step's parameters); SERL's, a copy of the policy re-synced every few steps.

Shapes: B episodes, T turns, A action tokens, K candidates.
"""
from __future__ import annotations

import jax.numpy as jnp

from asct_jax.rl.credit import CreditContext
from asct_jax.rl.types import Rollout, policy_inputs
from asct_jax.rl.types import merge_batch_turns as _flat


def teacher_outputs(ctx: CreditContext, params, batch: Rollout):
    """Hindsight teacher on the batch: (token log-probs [B, T, A] (0 on padding), its
    constrained distributions dist_logp, support [B, T, K, A])."""
    b, t = batch.turn_mask.shape
    logp, dist, support = ctx.policy.teacher_outputs(
        params, _flat(policy_inputs(batch)), _flat(batch.feedback), _flat(batch.actions),
        _flat(batch.cand_tokens), _flat(batch.cand_mask))
    shape = lambda x: x.reshape((b, t) + x.shape[1:])  # noqa: E731
    return jnp.where(batch.token_mask, shape(logp), 0.0), shape(dist), shape(support)


def teacher_log_probs(ctx: CreditContext, params, batch: Rollout):
    """Hindsight teacher log-probs [B, T, A] (0 on padding)."""
    b, t = batch.turn_mask.shape
    logp = ctx.policy.teacher_log_probs(params, _flat(policy_inputs(batch)),
                                        _flat(batch.feedback),
                                        _flat(batch.actions), _flat(batch.cand_tokens),
                                        _flat(batch.cand_mask))
    return jnp.where(batch.token_mask, logp.reshape(b, t, -1), 0.0)
