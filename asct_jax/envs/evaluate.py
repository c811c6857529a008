"""Scripted-policy rollouts of the JAX-native environments (benchmark, tests, sanity checks).

    policy(state, params, key) -> [] int32 candidate index  (e.g. module.expert_policy)
    out = rollout(env, params, policy, key, batch=1024)      # jit it with static env/policy

The episodes are played by the one loop (asct_jax.envs.play) with `scripted_chooser`:
the policy's index, per episode, is turned into the candidate's tokens, which go through
env.step like any action. Keys are per episode: episode i of `rollout` splits
split(key, batch)[i] into its reset key and the key it splits into one per turn.
"""
from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp

from asct_jax.envs.base import Environment
from asct_jax.envs.play import Choice, Chooser, play_keys, take_candidates


def scripted_chooser(policy: Callable, params) -> Chooser:
    """policy(state, params, key) -> [] index, vmapped: keys [N], one per episode."""
    def choose(keys, states, ts, cands, legal, costs) -> Choice:
        index = jax.vmap(policy, in_axes=(0, None, 0))(states, params, keys)
        return Choice(response=take_candidates(cands, index), index=index)
    return choose


def _play(env: Environment, params, policy: Callable, keys: jax.Array) -> Dict[str, jax.Array]:
    """Episodes of keys [B]: dict of [B] arrays (see `episode`)."""
    k_reset, k_pol = jax.vmap(jax.random.split, out_axes=1)(keys)
    turn_keys = jax.vmap(lambda k: jax.random.split(k, env.max_turns), out_axes=1)(k_pol)
    eps = play_keys(env, params, scripted_chooser(policy, params), k_reset, turn_keys)
    length = eps.record["turn_mask"].sum(axis=1).astype(jnp.int32)
    return {"return": eps.returns, "length": length, **eps.final.info}


def episode(env: Environment, params, policy: Callable, key: jax.Array) -> Dict[str, jax.Array]:
    """One episode. Returns dict of [] arrays: return, length, and the final info keys."""
    return jax.tree.map(lambda x: x[0], _play(env, params, policy, key[None]))


def rollout(env: Environment, params, policy: Callable, key: jax.Array,
            batch: int) -> Dict[str, jax.Array]:
    """`batch` independent episodes: dict of [batch] arrays (see `episode`)."""
    return _play(env, params, policy, jax.random.split(key, batch))
