"""The environment's judgement of a step (the hindsight warm start's progress,
factor_jax.hindsight.warm_start): is it as good as the scripted expert's own?

Progress comes from the environment, not the text: played on from s_{t+1} the expert ends
no worse, r_t + G*(s_{t+1}) >= G*(s_t), and no later, d*(s_{t+1}) + 1 <= d*(s_t) (G*, d*:
the expert's return and turns from a state, its turn counter reset; `expert_finish`). So
an epsilon step as good as the expert's (shop: the right option in another order;
science: a milestone out of the plan's order) is progress; a detour, a wrong object or a
ruin is not. Household's privileged expert walks straight to the hidden target: there
almost only its own step is progress.

Shapes: A / F action and feedback lengths, C candidates of one state.
"""
from __future__ import annotations

from typing import Callable, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import PAD_ID
from asct_jax.envs.play import Choice, StateActor, play_from


def scripted(env, teacher: str = "expert") -> Callable:
    """The scripted policy (state, params, key) -> [] i32 the warm start imitates."""
    return env.expert_policy if teacher == "expert" else env.scripted_policy(teacher)


def _fresh_turns(state):
    """The state with its turn counter at 0 (the expert gets the whole turn budget)."""
    return state.replace(turn=jnp.zeros_like(state.turn))


def expert_finish(env, env_params, state, key, teacher: str = "expert"
                  ) -> Tuple[chex.Array, chex.Array]:
    """(G* [], d* [] i32): the scripted expert's return and turns played on from ONE
    state (its turn counter reset; at most env.max_turns turns; 0, 0 if it is done)."""
    policy = scripted(env, teacher)

    def act(s, k, carry):
        cands, legal = env.legal_actions(s, env_params)
        a = policy(s, env_params, k)
        a = jnp.where(legal[a], a, jnp.argmax(legal)).astype(jnp.int32)  # off its path
        return Choice(response=cands[a], index=a, penalty=jnp.float32(0.0),
                      tokens=jnp.float32(0.0)), carry

    played = play_from(env, env_params, StateActor(init=lambda s: (), act=act),
                       _fresh_turns(state), key, env.max_turns)
    return played.ret, played.calls


def failure_feedback(env, env_params, state) -> chex.Array:
    """[F]: the environment's feedback to an action it cannot parse at ONE state (all PAD
    tokens sent): its "Nothing happens."."""
    pad = jnp.full((env.action_len,), PAD_ID, jnp.int32)
    return env.step(_fresh_turns(state), pad, env_params)[1].feedback


def step_progress(env, env_params, state, response, key, teacher: str = "expert"
                  ) -> Tuple[chex.Array, chex.Array]:
    """(progress [] bool, feedback [F]) of `response` [A] at ONE stored state: the step
    replayed (the state carries its randomness: the recorded transition) and
    progress = r + G*(s') >= G*(s) - 1e-6 and (s' done or d*(s') + 1 <= d*(s))."""
    s0 = _fresh_turns(state)
    s1, ts = env.step(s0, response, env_params)
    k0, k1 = jax.random.split(key)
    g0, d0 = expert_finish(env, env_params, s0, k0, teacher)
    g1, d1 = expert_finish(env, env_params, s1, k1, teacher)
    no_worse = ts.reward + g1 >= g0 - 1e-6
    return no_worse & (ts.done | (d1 + 1 <= d0)), ts.feedback


def candidate_progress(env, env_params, state, responses, key, teacher: str = "expert"
                       ) -> Tuple[chex.Array, chex.Array]:
    """(progress [C] bool, feedback [C, F]) of each response [C, A] stepped from ONE stored
    state: step_progress's rule, r_c + G*(s'_c) >= G*(s) - 1e-6 and (s'_c done or
    d*(s'_c) + 1 <= d*(s)), with G*(s), d*(s) played once for the C candidates."""
    s0 = _fresh_turns(state)
    k0, k1 = jax.random.split(key)
    g0, d0 = expert_finish(env, env_params, s0, k0, teacher)

    def one(response, k):
        s1, ts = env.step(s0, response, env_params)
        g1, d1 = expert_finish(env, env_params, s1, k, teacher)
        no_worse = ts.reward + g1 >= g0 - 1e-6
        return no_worse & (ts.done | (d1 + 1 <= d0)), ts.feedback

    return jax.vmap(one)(responses, jax.random.split(k1, responses.shape[0]))
