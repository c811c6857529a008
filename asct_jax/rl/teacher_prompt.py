"""The hindsight teacher's prompt (SERL's, OliverLeeXZ/SERL recipe/serl/
privileged_context.py; asct_jax.envs.prompt): x_t and the feedback o_{t+1} in one message,

    [x_t (its message end stripped) | header | o_{t+1} | footer],

the prefix FACTOR's and SERL's teachers read (factor_jax.teacher re-exports it) and the
hindsight warm start teaches (asct_jax.rl.hindsight_warm_start): one function, so the
prompt taught is the one the credit reads.

Shapes: N rows, O observation tokens, F feedback tokens.
"""
from __future__ import annotations

import jax.numpy as jnp

from asct_jax.envs.tokenizer import get_tokenizer, word_teacher_prompt
from asct_jax.rl.policy import pads_to_right


def teacher_prefix(policy, obs, feedback, prompt: str = "serl"):
    """The teacher's prefix [N, O + F + ...] with its PAD moved right (the policy's pass
    left-aligns a prefix): obs [N, O] without its last `strip` real tokens, then header,
    feedback [N, F], footer of policy.prompt.teacher_prompt(prompt) (TEACHER_PROMPTS)."""
    t = policy.prompt.teacher_prompt(prompt)
    if t is None:        # the default pieces: the shared environment vocabulary's
        t = word_teacher_prompt(get_tokenizer())
    if max(t.header + t.footer, default=-1) >= policy.vocab_size:
        raise ValueError(f"teacher prompt: its ids reach {max(t.header + t.footer)}, past the "
                         f"policy's vocabulary ({policy.vocab_size}); give the policy "
                         "PromptTokens(teacher=...) in its own vocabulary")
    n, pad = obs.shape[0], policy.pad_id
    if t.strip:
        real = obs != pad
        after = jnp.sum(real, axis=1, keepdims=True) - jnp.cumsum(real, axis=1)  # real after
        obs = jnp.where(real & (after < t.strip), pad, obs)
    ids = lambda x: jnp.broadcast_to(jnp.asarray(x, obs.dtype), (n, len(x)))  # noqa: E731
    return pads_to_right(jnp.concatenate(
        [obs, ids(t.header), feedback, ids(t.footer)], axis=1), pad)
