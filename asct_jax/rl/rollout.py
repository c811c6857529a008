"""Batched multi-turn episodes of the policy in a JAX-native environment.

The loop is asct_jax.envs.play (one lax.scan over turns, grouped reset keys: a group
shares its initial state and the environment's randomness); the policy plays it through
its actor's chooser (asct_jax.rl.actor.chooser: each turn, score every legal candidate
with pi_old in one batched decoder pass and sample one, or write a response and project
it). Everything the credit methods need is kept, including the environment state at
every turn (recoverable).
"""
from __future__ import annotations

from typing import Any, Optional

import chex
import jax.numpy as jnp

from asct_jax.envs.base import Environment
from asct_jax.envs.play import Episodes, play
from asct_jax.rl import actor
from asct_jax.rl.policy import Policy
from asct_jax.rl.types import Rollout


def episodes_to_rollout(eps: Episodes) -> Rollout:
    """The Rollout of `play`'s Episodes (a generating chooser's prompts, action-token
    mask and per-turn statistics included)."""
    extra = dict(eps.extra)
    prompts, action_mask = extra.pop("prompts", None), extra.pop("action_mask", None)
    turn_info = {k: v for k, v in extra.items() if k.startswith("gen/")}
    return Rollout(**eps.record, final_info=eps.final.info, group=eps.group,
                   env_calls=eps.env_calls, prompts=prompts,
                   action_mask=None if action_mask is None
                   else action_mask & eps.record["token_mask"],
                   turn_info=turn_info or None)


def rollout(policy: Policy, params: Any, env: Environment, env_params: Any,
            key: chex.PRNGKey, num_groups: int, group_size: int,
            greedy: bool = False, question_ids: Optional[chex.Array] = None) -> Rollout:
    """Plays B = num_groups * group_size episodes of T = env.max_turns turns.

    question_ids: [num_groups] i32, the question of each group (an environment with a
    question split: asct_jax.envs.questions step_question_ids, evaluation_question_ids),
    or None: env.reset draws each group's task.
    Returns a Rollout with [B, T, ...] arrays (see types.Rollout).
    """
    eps = play(env, env_params, actor.chooser(policy, params, greedy), key, num_groups,
               group_size, policy.pad_id, question_ids)
    return episodes_to_rollout(eps)


def episode_metrics(batch: Rollout) -> dict:
    """Means over episodes of the return, the length and the final info; a generating
    actor's per-turn statistics averaged over real turns (gen/invalid: the invalid rate)."""
    out = {f"env/{k}": jnp.mean(v) for k, v in batch.final_info.items()}
    out["return"] = jnp.mean(jnp.sum(batch.rewards, axis=1))
    out["episode_len"] = jnp.mean(jnp.sum(batch.turn_mask, axis=1).astype(jnp.float32))
    turns = jnp.maximum(jnp.sum(batch.turn_mask), 1)
    for k, v in (batch.turn_info or {}).items():
        out[k] = jnp.sum(jnp.where(batch.turn_mask, v, 0.0)) / turns
    return out
