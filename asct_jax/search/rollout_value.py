"""Monte-Carlo value of one state: M rollouts of pi_old to the end of the episode
(asct_jax.envs.play.play_from).

Used by the search's leaf evaluation, by VinePPO (M = 9 rollouts per visited state) and by
FACTOR's value calibration. Works on ONE state; vmap it over states.

Environment randomness. A state carries its own PRNG key (base.py), so by default
(`rekey=False`) the M rollouts from one state share the environment's future randomness
(exactly as restoring a real environment's saved state or replaying it from the same seed
does) and differ only by the policy's samples: V_hat then estimates E[G | s, env key]
(common random numbers: unbiased on average over episodes, lower variance). With
`rekey=True` each rollout replaces `state.key` by a fresh key, so V_hat estimates the
expectation over the environment's randomness too (needs a `key` field in the state).
"""
from __future__ import annotations

from typing import Any, Tuple, Union

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.play import PolicyFn, StateActor, play_from, rekey_state


def rollout_return(
    env, env_params: Any, state: Any, policy_fn: Union[StateActor, PolicyFn],
    key: chex.PRNGKey, rekey: bool = False,
) -> Tuple[chex.Array, chex.Array, chex.Array]:
    """One rollout of pi_old from `state` to the end (at most env.max_turns steps).

    Returns (return G = sum of rewards net of the penalties the actor reports each turn
    (play_from) [] f32, aux_tokens [] f32, env_calls [] i32).
    """
    if rekey:
        key, env_key = jax.random.split(key)
        state = rekey_state(state, env_key)
    out = play_from(env, env_params, policy_fn, state, key, env.max_turns)
    return out.ret.astype(jnp.float32), out.tokens.astype(jnp.float32), out.calls


def mc_return(
    env,
    env_params: Any,
    state: Any,
    policy_fn: Union[StateActor, PolicyFn],
    key: chex.PRNGKey,
    num_rollouts: int,
    rekey: bool = False,
) -> Tuple[chex.Array, chex.Array, chex.Array, chex.Array]:
    """V_hat(s) = (1/M) sum_m G_m, G_m the return of the m-th rollout of pi_old from s.

    Args:
      env: an Environment; env_params its params.
      state: ONE environment state (no batch axis).
      policy_fn: pi_old: state -> (logp [K] over candidates, value []), or a StateActor.
      key: PRNG key.
      num_rollouts: M (static).
      rekey: give each rollout a fresh environment key (see the module docstring).

    Returns:
      mean_return [] f32 (0 for a done state), returns [M] f32,
      aux_tokens [] f32 (token cost of every executed action, summed over the M rollouts),
      env_calls [] i32 (environment steps, summed over the M rollouts).
    """
    if num_rollouts < 1:
        raise ValueError(f"num_rollouts must be >= 1, got {num_rollouts}")
    keys = jax.random.split(key, num_rollouts)
    returns, toks, calls = jax.vmap(
        lambda k: rollout_return(env, env_params, state, policy_fn, k, rekey)
    )(keys)
    chex.assert_shape(returns, (num_rollouts,))
    return jnp.mean(returns), returns, jnp.sum(toks), jnp.sum(calls).astype(jnp.int32)
