"""The hindsight teacher's prompt: x_t and the feedback o_{t+1} in one message,

    [x_t (its message end stripped) | header | o_{t+1} | footer],

the prefix FACTOR's and SERL's teachers read (factor_jax.teacher re-exports it) and the
hindsight warm start teaches (factor_jax.hindsight.warm_start): one function, so the prompt
taught is the one the credit reads.

"serl" (TEACHER_PROMPTS) is SERL's prompt (OliverLeeXZ/SERL, recipe/serl/
privileged_context.py: privileged_context_template around its "immediate_feedback"
section), one user message: the environments' feedback frame (asct_jax.envs.prompt:
PromptTokens.feedback_frame, `render_feedback` its text):

    {prompt}\\n\\nImmediate feedback from the current step:\\n{feedback}
    \\n\\nCorrectly solve the current task.\\n                     (one string: no break)

"appended" is this project's earlier one, the feedback after the student's prompt
(PromptTokens.appended_frame: a chat view's second user message "The result of your next
action will be:\\n{feedback}"; the word vocabulary: SEP feedback).

Shapes: N rows, O observation tokens, F feedback tokens.
"""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp

from asct_jax.envs.prompt import FeedbackFrame, PromptTokens
from asct_jax.envs.tokenizer import get_tokenizer, word_feedback_frame
from asct_jax.rl.padding import pads_to_right

TEACHER_PROMPTS = ("serl", "appended")   # factor.teacher_prompt, serl.teacher_prompt


def teacher_frame(prompt: PromptTokens, name: str) -> Optional[FeedbackFrame]:
    """The teacher prompt `name` (TEACHER_PROMPTS) in the ids of `prompt`: "serl" its
    feedback_frame (None: SERL's in the shared environment vocabulary,
    asct_jax.envs.tokenizer.word_feedback_frame), "appended" its appended_frame."""
    if name not in TEACHER_PROMPTS:
        raise ValueError(f"teacher prompt must be one of {TEACHER_PROMPTS}, got {name!r}")
    return prompt.appended_frame if name == "appended" else prompt.feedback_frame


def teacher_prefix(policy, obs, feedback, prompt: str = "serl"):
    """The teacher's prefix [N, O + F + ...] with its PAD moved right (the policy's pass
    left-aligns a prefix): obs [N, O] without its last `strip` real tokens, then header,
    feedback [N, F], footer of teacher_frame(policy.prompt, prompt) (TEACHER_PROMPTS)."""
    t = teacher_frame(policy.prompt, prompt)
    if t is None:        # the default pieces: the shared environment vocabulary's
        t = word_feedback_frame(get_tokenizer())
    if max(t.header + t.footer, default=-1) >= policy.vocab_size:
        raise ValueError(f"teacher prompt: its ids reach {max(t.header + t.footer)}, past the "
                         f"policy's vocabulary ({policy.vocab_size}); give the policy "
                         "PromptTokens(feedback_frame=...) in its own vocabulary")
    n, pad = obs.shape[0], policy.pad_id
    if t.strip:
        real = obs != pad
        after = jnp.sum(real, axis=1, keepdims=True) - jnp.cumsum(real, axis=1)  # real after
        obs = jnp.where(real & (after < t.strip), pad, obs)
    ids = lambda x: jnp.broadcast_to(jnp.asarray(x, obs.dtype), (n, len(x)))  # noqa: E731
    return pads_to_right(jnp.concatenate(
        [obs, ids(t.header), feedback, ids(t.footer)], axis=1), pad)
