"""How the actor acts: the one place that asks which actor a policy is.

Two actors share the Policy interface (asct_jax.rl.policy):

  * the candidate scorer (`Policy`): each turn it scores every legal candidate
    (cands [N, K, A], one batched pass, policy.py) and samples (or argmaxes) one;
  * the generating actor (`asct_jax.rl.generation.GenerationPolicy`, built for
    `actor.chooser = "generate"` by asct_jax.rl.build): it writes
    "<think>...</think><action>...</action>" and the environment receives the response's
    projection onto the legal candidates.

`generates(policy)` is the one predicate; everything that acts differently by actor asks
it, or one of the functions below built on it:

    chooser(policy, params, greedy)        the turn's choice of N episodes (envs.play's
                                           chooser): the rollout's, the host games'
    generation_spec(policy)                its GenerationSpec, or None
    writes_at_restored_states(policy)      it writes its turns at restored states too
                                           (actor.continuations = "chooser")
    state_scorer(env, env_params, policy, params)   pi_old at ONE state: (logp [K], value [])
    state_actor(env, env_params, policy, params)    pi_old acting at ONE restored state

All are pure in (params, arrays) once built: the choosers and actors are traced inside
the compiled rollout / step (no Python loop over turns or episodes).
"""
from __future__ import annotations

from typing import Any, Optional

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.play import (Choice, Chooser, PolicyFn, StateActor, candidate_actor,
                                take_candidates)
from asct_jax.rl.generation import (GenerationChooser, GenerationPolicy, GenerationSpec,
                                    generating_actor, model_writer)
from asct_jax.rl.policy import Policy


def generates(policy: Any) -> bool:
    """The policy writes its turns (a GenerationPolicy); False: it scores the
    environment's candidates."""
    return isinstance(policy, GenerationPolicy)


def generation_spec(policy: Any) -> Optional[GenerationSpec]:
    """policy's GenerationSpec when it writes its turns (`generates`), else None."""
    return policy.spec if generates(policy) else None


def writes_at_restored_states(policy: Any) -> bool:
    """pi_old writes its turns at restored states too (a generating actor with
    actor.continuations = "chooser"); else it samples a candidate from `state_scorer`
    there (the candidate scorer, or actor.continuations = "score")."""
    return generates(policy) and policy.spec.continuations == "chooser"


# ----------------------------------------------------------------------------- a turn of N

def select_candidate(key: chex.PRNGKey, cand_logp: chex.Array, greedy: bool) -> chex.Array:
    """Samples (or argmaxes) a candidate index from cand_logp [N, K] -> [N]."""
    if greedy:
        return jnp.argmax(cand_logp, axis=-1)
    return jax.random.categorical(key, cand_logp, axis=-1)


def candidate_chooser(policy: Policy, params: Any, greedy: bool = False) -> Chooser:
    """The candidate scorer's chooser: score the candidates [N, K, A], sample (or argmax)
    one; its token log-probs [N, A], the value [N] of x_t."""
    def choose(key, states, ts, cands, legal, costs) -> Choice:
        cand_logp, token_logp, value = policy.candidate_log_probs(
            params, ts.observation, cands, legal)
        index = select_candidate(key, cand_logp, greedy)
        actions = take_candidates(cands, index)
        return Choice(response=actions, index=index, logp=take_candidates(token_logp, index),
                      value=value, scored=policy.scored_tokens(actions))
    return choose


def chooser(policy: Policy, params: Any, greedy: bool = False) -> Chooser:
    """The actor's chooser (asct_jax.envs.play.Chooser): candidate scoring, or the
    generating actor's stateful chooser (its carry the prompt's history) writing with
    the model (KV-cached sampling, asct_jax.rl.generation.model_writer)."""
    if generates(policy):
        return GenerationChooser(policy.spec, model_writer(policy, params, greedy),
                                 policy.pad_id)
    return candidate_chooser(policy, params, greedy)


# ----------------------------------------------------------------------------- ONE state

def state_scorer(env: Any, env_params: Any, policy: Policy, params: Any) -> PolicyFn:
    """pi_old and the critic at ONE environment state: state -> (logp [K], value []).

    The form the search, VinePPO and value calibration consume (vmapped by them); for a
    generating actor, the canonical responses' scores (GenerationPolicy
    .candidate_log_probs)."""
    def fn(state):
        obs = env.observe(state, env_params)
        cands, legal = env.legal_actions(state, env_params)
        cand_logp, _, value = policy.candidate_log_probs(params, obs[None], cands[None],
                                                         legal[None])
        return cand_logp[0], value[0]
    return fn


def state_actor(env: Any, env_params: Any, policy: Policy, params: Any) -> StateActor:
    """pi_old acting at ONE restored state (envs.play.StateActor): the generating actor
    writing its turn (writes_at_restored_states), else a candidate sampled from
    state_scorer. What VinePPO's rollouts, the search's continuations and FACTOR's
    continuations play."""
    if writes_at_restored_states(policy):
        return generating_actor(env, env_params, policy, params)
    return candidate_actor(env, env_params, state_scorer(env, env_params, policy, params))
