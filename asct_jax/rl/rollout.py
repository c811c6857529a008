"""Batched multi-turn episodes of the policy in a JAX-native environment.

The loop is asct_jax.envs.play (one lax.scan over turns, grouped reset keys: a group
shares its initial state and the environment's randomness); the policy plays it through
`candidate_chooser`: each turn, score every legal candidate with pi_old (one batched
decoder pass, see policy.py) and sample one. Everything the credit methods need is kept,
including the environment state at every turn (recoverable).
"""
from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import Environment
from asct_jax.envs.play import Choice, Chooser, play, take_candidates
from asct_jax.rl.policy import Policy
from asct_jax.rl.types import Rollout


def select_candidate(key: chex.PRNGKey, cand_logp: chex.Array, greedy: bool) -> chex.Array:
    """Samples (or argmaxes) a candidate index from cand_logp [N, K] -> [N]."""
    if greedy:
        return jnp.argmax(cand_logp, axis=-1)
    return jax.random.categorical(key, cand_logp, axis=-1)


def candidate_chooser(policy: Policy, params: Any, greedy: bool = False) -> Chooser:
    """The policy's chooser: score the candidates [N, K, A], sample (or argmax) one."""
    def choose(key, states, ts, cands, legal, costs) -> Choice:
        cand_logp, token_logp, value = policy.candidate_log_probs(
            params, ts.observation, cands, legal)
        index = select_candidate(key, cand_logp, greedy)
        actions = take_candidates(cands, index)
        return Choice(actions=actions, index=index, logp=take_candidates(token_logp, index),
                      value=value, scored=policy.scored_tokens(actions))
    return choose


def rollout(policy: Policy, params: Any, env: Environment, env_params: Any,
            key: chex.PRNGKey, num_groups: int, group_size: int,
            greedy: bool = False) -> Rollout:
    """Plays B = num_groups * group_size episodes of T = env.max_turns turns.

    Returns a Rollout with [B, T, ...] arrays (see types.Rollout).
    """
    eps = play(env, env_params, candidate_chooser(policy, params, greedy), key, num_groups,
               group_size, policy.pad_id)
    return Rollout(**eps.record, final_info=eps.final.info, group=eps.group,
                   env_calls=eps.env_calls)


def episode_metrics(batch: Rollout) -> dict:
    """Means over episodes of the return, the length and the final info."""
    out = {f"env/{k}": jnp.mean(v) for k, v in batch.final_info.items()}
    out["return"] = jnp.mean(jnp.sum(batch.rewards, axis=1))
    out["episode_len"] = jnp.mean(jnp.sum(batch.turn_mask, axis=1).astype(jnp.float32))
    return out
