"""Monte-Carlo value of one state: M rollouts of pi_old to the end of the episode.

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

import dataclasses
from typing import Any, Callable, Tuple, Union

import chex
import jax
import jax.numpy as jnp

PolicyFn = Callable[[Any], Tuple[chex.Array, chex.Array]]


@dataclasses.dataclass(frozen=True)
class StateActor:
    """pi_old acting at ONE restored state, as a rollout's chooser acts (what play_out,
    and so VinePPO's rollouts and FACTOR's continuations, play with).

    init(state) -> carry: what the actor remembers at the restored state (the generating
      actor's prompt history, empty there; () for the candidate scorer).
    act(state, key, carry) -> (env_action [A_env] int32, penalty [] f32 subtracted from
      the step's reward, tokens [] f32 the action's token cost, carry).
    """

    init: Callable[[Any], Any]
    act: Callable[..., Tuple[chex.Array, chex.Array, chex.Array, Any]]


def candidate_actor(env, env_params: Any, policy_fn: PolicyFn) -> StateActor:
    """The candidate scorer as a StateActor: a ~ pi_old(.|s) over the legal candidates
    (sample_candidate), its candidate tokens sent, its action cost counted."""

    def act(state, key, carry):
        cands, legal = env.legal_actions(state, env_params)
        logp, _ = policy_fn(state)
        a = sample_candidate(key, logp, legal)
        cost = env.action_costs(state, env_params)[a]
        return cands[a], jnp.float32(0.0), jnp.asarray(cost, jnp.float32), carry

    return StateActor(init=lambda state: (), act=act)


def as_actor(env, env_params: Any, actor: Union[StateActor, PolicyFn]) -> StateActor:
    """A StateActor as it is, a PolicyFn as its candidate_actor."""
    return actor if isinstance(actor, StateActor) else candidate_actor(env, env_params, actor)


def state_done(env, state: Any, env_params: Any) -> chex.Array:
    """[] bool: the state's own done flag (`state.done`) or, for environments whose state
    names it otherwise, "no legal candidate"."""
    done = getattr(state, "done", None)
    if done is None:
        _, legal = env.legal_actions(state, env_params)
        return ~jnp.any(legal)
    return jnp.asarray(done, bool)


def sample_candidate(key: chex.PRNGKey, logp: chex.Array, legal: chex.Array) -> chex.Array:
    """k ~ pi_old(.|s) restricted to the legal candidates (any candidate if none is legal,
    which makes an ordinary "nothing happens" step)."""
    logits = jnp.where(legal, logp, -jnp.inf)
    logits = jnp.where(jnp.any(legal & jnp.isfinite(logits)), logits, jnp.zeros_like(logp))
    return jax.random.categorical(key, logits).astype(jnp.int32)


def rekey_state(state: Any, key: chex.PRNGKey) -> Any:
    """The state with its own PRNG key (`state.key`) replaced by a fresh one."""
    if not (hasattr(state, "key") and hasattr(state, "replace")):
        raise ValueError("rekey=True needs an environment state with a `key` field")
    return state.replace(key=jax.random.split(key)[0])


def play_out(env, env_params: Any, state: Any, actor: Union[StateActor, PolicyFn],
             key: chex.PRNGKey, max_steps: int, start_return=0.0):
    """pi_old played on from `state` until done or `max_steps` steps (lax.while_loop).

    actor: a StateActor, or a PolicyFn (state -> (logp [K], value [])) sampled over the
    legal candidates. A step's reward is the environment's minus the actor's penalty.
    Returns (final state, start_return + sum of rewards [] f32, aux_tokens [] f32,
    env_calls [] i32, done [] bool)."""
    actor = as_actor(env, env_params, actor)

    def cond(c):
        _, _, _, _, done, t, _, _ = c
        return (~done) & (t < max_steps)

    def body(c):
        s, g, tok, calls, _, t, k, carry = c
        k, sub = jax.random.split(k)
        action, penalty, cost, carry = actor.act(s, sub, carry)
        s, ts = env.step(s, action, env_params)
        return (s, g + ts.reward - penalty, tok + cost, calls + 1, jnp.asarray(ts.done, bool),
                t + 1, k, carry)

    init = (
        state,
        jnp.asarray(start_return, jnp.float32),
        jnp.float32(0.0),
        jnp.int32(0),
        state_done(env, state, env_params),
        jnp.int32(0),
        key,
        actor.init(state),
    )
    s, g, tok, calls, done, _, _, _ = jax.lax.while_loop(cond, body, init)
    return s, g, tok, calls, done


def rollout_return(
    env, env_params: Any, state: Any, policy_fn: Union[StateActor, PolicyFn],
    key: chex.PRNGKey, rekey: bool = False,
) -> Tuple[chex.Array, chex.Array, chex.Array]:
    """One rollout of pi_old from `state` to the end (at most env.max_turns steps).

    Returns (return G = sum of rewards [] f32, aux_tokens [] f32, env_calls [] i32).
    """
    if rekey:
        key, env_key = jax.random.split(key)
        state = rekey_state(state, env_key)
    _, g, tok, calls, _ = play_out(env, env_params, state, policy_fn, key, env.max_turns)
    return g.astype(jnp.float32), tok.astype(jnp.float32), calls


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
