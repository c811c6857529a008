"""Scripted-policy rollouts of the JAX-native environments (benchmark, tests, sanity checks).

    policy(state, params, key) -> [] int32 candidate index  (e.g. module.expert_policy)
    out = rollout(env, params, policy, key, batch=1024)      # jit it with static env/policy

A rollout is vmap over the batch of a lax.scan over max_turns steps; the policy's index
is turned into the candidate's tokens, which go through env.step like any action.
"""
from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp

from asct_jax.envs.base import Environment


def episode(env: Environment, params, policy: Callable, key: jax.Array) -> Dict[str, jax.Array]:
    """One episode. Returns dict of [] arrays: return, length, and the final info keys."""
    k_reset, k_pol = jax.random.split(key)
    state, ts = env.reset(k_reset, params)

    def body(carry, k):
        state, ts, ret, length = carry
        cands, _ = env.legal_actions(state, params)
        a = policy(state, params, k)
        new_state, new_ts = env.step(state, cands[a], params)
        ret = ret + new_ts.reward
        length = length + (~state.done).astype(jnp.int32)
        return (new_state, new_ts, ret, length), None

    init = (state, ts, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
    (state, ts, ret, length), _ = jax.lax.scan(
        body, init, jax.random.split(k_pol, env.max_turns))
    return {"return": ret, "length": length, **ts.info}


def rollout(env: Environment, params, policy: Callable, key: jax.Array,
            batch: int) -> Dict[str, jax.Array]:
    """`batch` independent episodes: dict of [batch] arrays (see `episode`)."""
    keys = jax.random.split(key, batch)
    return jax.vmap(lambda k: episode(env, params, policy, k))(keys)
