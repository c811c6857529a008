"""Batched multi-turn episodes of the policy in a JAX-native environment (one lax.scan).

Episodes come in groups of G that share their initial state (same reset key), episode i in
group i // G. The state carries its own PRNG key, so a group also shares the environment's
randomness (common random numbers): its episodes differ only by the policy's choices. Each turn: list the legal candidates, score them all with pi_old (one batched
decoder pass, see policy.py), sample one, step the environment. Everything the credit
methods need is kept, including the environment state at every turn (recoverable).
"""
from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import Environment
from asct_jax.rl.policy import Policy
from asct_jax.rl.types import Rollout


def group_reset_keys(key: chex.PRNGKey, num_groups: int, group_size: int) -> chex.Array:
    """[num_groups * group_size] reset keys, each repeated G times (contiguous groups)."""
    keys = jax.random.split(key, num_groups)
    return jnp.repeat(keys, group_size, axis=0)


def select_candidate(key: chex.PRNGKey, cand_logp: chex.Array, greedy: bool) -> chex.Array:
    """Samples (or argmaxes) a candidate index from cand_logp [N, K] -> [N]."""
    if greedy:
        return jnp.argmax(cand_logp, axis=-1)
    return jax.random.categorical(key, cand_logp, axis=-1)


def rollout(policy: Policy, params: Any, env: Environment, env_params: Any,
            key: chex.PRNGKey, num_groups: int, group_size: int,
            greedy: bool = False) -> Rollout:
    """Plays B = num_groups * group_size episodes of T = env.max_turns turns.

    Returns a Rollout with [B, T, ...] arrays (see types.Rollout).
    """
    reset_key, turn_key = jax.random.split(key)
    reset_keys = group_reset_keys(reset_key, num_groups, group_size)
    batch = reset_keys.shape[0]
    states, ts = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)
    done0 = jnp.zeros((batch,), bool)

    def turn(carry, key_t):
        states, ts, done = carry
        cands, legal = jax.vmap(env.legal_actions, in_axes=(0, None))(states, env_params)
        costs = jax.vmap(env.action_costs, in_axes=(0, None))(states, env_params)
        cand_logp, token_logp, value = policy.candidate_log_probs(
            params, ts.observation, cands, legal)
        index = select_candidate(key_t, cand_logp, greedy)
        actions = jnp.take_along_axis(cands, index[:, None, None], axis=1)[:, 0]
        logp = jnp.take_along_axis(token_logp, index[:, None, None], axis=1)[:, 0]
        new_states, new_ts = jax.vmap(env.step, in_axes=(0, 0, None))(states, actions, env_params)
        live = ~done
        token_mask = (actions != policy.pad_id) & live[:, None]
        out = dict(
            obs=ts.observation, feedback=new_ts.feedback, actions=actions,
            action_index=jnp.where(live, index, -1), token_mask=token_mask, turn_mask=live,
            logp_old=jnp.where(token_mask, logp, 0.0), values=value,
            rewards=jnp.where(live, new_ts.reward, 0.0), dones=new_ts.done & live,
            cand_tokens=cands, cand_mask=legal, cand_costs=costs, states=states,
        )
        return (new_states, new_ts, done | new_ts.done), out

    keys = jax.random.split(turn_key, env.max_turns)
    (_, last_ts, _), traj = jax.lax.scan(turn, (states, ts, done0), keys)
    # scan stacks on the leading axis: [T, B, ...] -> [B, T, ...]
    traj = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), traj)
    return Rollout(
        **traj,
        final_info=last_ts.info,
        group=jnp.arange(batch) // group_size,
        env_calls=jnp.sum(traj["turn_mask"]).astype(jnp.int32),
    )


def episode_metrics(batch: Rollout) -> dict:
    """Means over episodes of the return, the length and the final info."""
    out = {f"env/{k}": jnp.mean(v) for k, v in batch.final_info.items()}
    out["return"] = jnp.mean(jnp.sum(batch.rewards, axis=1))
    out["episode_len"] = jnp.mean(jnp.sum(batch.turn_mask, axis=1).astype(jnp.float32))
    return out
