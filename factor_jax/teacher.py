"""The hindsight teacher (docs/methods.md, FACTOR > HTA, Baselines > SERL): the policy's
parameters reading SERL's teacher prompt (OliverLeeXZ/SERL, recipe/serl/
privileged_context.py; factor_jax.hindsight.teacher_prompt), x_t and the feedback o_{t+1}
in one message,

    [x_t (its message end stripped) | header | o_{t+1} | footer | action header | y_t],

header = "\\n\\nImmediate feedback from the current step:\\n", footer = "\\n\\nCorrectly solve
the current task.\\n" (+ the message end), through the policy's generic passes
(token_log_probs, distributions) over that prefix. FACTOR's code has no teacher prompt of
its own, so both teachers read SERL's; `prompt="appended"` is the earlier prompt
(PromptTokens.appended_frame). The prefix is factor_jax.hindsight.teacher_prompt
.teacher_prefix (re-exported here), the one the hindsight warm start teaches.
FACTOR's teacher is pi_old (the step's parameters); SERL's, a copy of the policy re-synced
every few steps. FACTOR's KL to the teacher is a reduction of the update's own pass
(`kl_reduce`, an asct_jax.rl.credit.DistReduce).

Shapes: B episodes, T turns, A action tokens, K candidates, N = B T rows.
"""
from __future__ import annotations

import jax.numpy as jnp

from asct_jax.rl.credit import CreditContext, DistReduce
from asct_jax.rl.types import Rollout, policy_inputs
from asct_jax.rl.types import merge_batch_turns as _flat
from factor_jax.hindsight.teacher_prompt import (  # noqa: F401  (re-export)
    TEACHER_PROMPTS, teacher_prefix)
from factor_jax.losses import forward_kl

TEACHER_DIST = "teacher_dist"   # the key of the teacher's distributions in loss_inputs


def _teacher_args(ctx: CreditContext, batch: Rollout, prompt: str):
    prefix = teacher_prefix(ctx.policy, _flat(policy_inputs(batch)), _flat(batch.feedback),
                            prompt)
    return prefix, _flat(batch.responses), _flat(batch.cand_tokens), _flat(batch.cand_mask)


def teacher_outputs(ctx: CreditContext, params, batch: Rollout, prompt: str = "serl"):
    """Hindsight teacher on the batch: (token log-probs [B, T, A] (0 on padding), its
    next-token distributions dist_logp, support in the policy's layout: [B, T, K, A]
    over the candidates; [B, T, R, V] and [B, T, 1, 1] for the generating actor)."""
    b, t = batch.turn_mask.shape
    logp, dist, support = ctx.policy.distributions(params, *_teacher_args(ctx, batch, prompt))
    shape = lambda x: x.reshape((b, t) + x.shape[1:])  # noqa: E731
    return jnp.where(batch.token_mask, shape(logp), 0.0), shape(dist), shape(support)


def teacher_log_probs(ctx: CreditContext, params, batch: Rollout, prompt: str = "serl"):
    """Hindsight teacher log-probs [B, T, A] (0 on padding)."""
    b, t = batch.turn_mask.shape
    logp = ctx.policy.token_log_probs(params, *_teacher_args(ctx, batch, prompt))
    return jnp.where(batch.token_mask, logp.reshape(b, t, -1), 0.0)


def _kl_to_teacher(dist_logp, support, teacher_dist):
    """KL(pi_T || pi_theta) per position (forward_kl) of the pass's distributions."""
    return forward_kl(teacher_dist, dist_logp, support)


# The update's pass reduces its distributions to the per-token KL to the teacher's,
# which the credit put in loss_inputs[TEACHER_DIST] (chunk by chunk over a vocabulary).
kl_reduce = DistReduce(fn=_kl_to_teacher, inputs=lambda credit: credit.loss_inputs[TEACHER_DIST])
