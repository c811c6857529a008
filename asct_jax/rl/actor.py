"""How the actor acts: the one place that asks which actor a policy is.

Two actors share the Policy interface (asct_jax.rl.policy):

  * the candidate scorer (`Policy`): each turn it scores every legal candidate
    (cands [N, K, A], one batched pass, policy.py) and samples (or argmaxes) one;
  * the generating actor (`asct_jax.rl.generation.GenerationPolicy`, built for
    `actor.chooser = "generate"` by asct_jax.rl.build): it writes
    "<think>...</think><action>...</action>" and the environment receives the response's
    projection onto the legal candidates.

`make_policy` builds one or the other (from the run's `actor` section, read by
asct_jax.rl.build); `generates(policy)` is the one predicate; everything that acts
differently by actor asks it, or one of the functions below built on it:

    chooser(policy, params, greedy)        the turn's choice of N episodes (envs.play's
                                           chooser): the rollout's, the host games' (with
                                           their warm start's forced expert turns)
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
                                    Writer, generating_actor, model_writer, scripted_writer)
from asct_jax.rl.policy import Policy


def make_policy(graphdef, vocab_size: int, shape: Any, prompt: Any,
                spec: Optional[GenerationSpec], label_score: str = "sum",
                prompt_widths: Optional[int] = None) -> Policy:
    """The actor over a decoder graph: the generating actor when there is a spec (the
    run's `actor` section, asct_jax.rl.build.generation_spec), else the candidate scorer.
    shape: the source's TextShape (O, A, F, K); prompt: its PromptTokens."""
    widths = {} if prompt_widths is None else {"prompt_widths": prompt_widths}
    if spec is not None:
        return GenerationPolicy(graphdef, vocab_size, spec, shape.obs_len, shape.action_len,
                                shape.num_actions, shape.feedback_len, prompt, **widths)
    return Policy(graphdef, vocab_size, shape.obs_len, shape.action_len, shape.feedback_len,
                  prompt, label_score=label_score, **widths)


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


def candidate_chooser(policy: Policy, params: Any, greedy: bool = False,
                      forced: Optional[chex.Array] = None) -> Chooser:
    """The candidate scorer's chooser: score the candidates [N, K, A], sample (or argmax)
    one; its token log-probs [N, A], the value [N] of x_t. forced: as `chooser`."""
    def choose(key, states, ts, cands, legal, costs) -> Choice:
        cand_logp, token_logp, value = policy.candidate_log_probs(
            params, ts.observation, cands, legal)
        index = select_candidate(key, cand_logp, greedy)
        if forced is not None:
            index = jnp.where(forced >= 0, forced, index)
        actions = take_candidates(cands, index)
        logp = take_candidates(token_logp, index)
        if forced is not None:
            logp = jnp.where((forced >= 0)[:, None], 0.0, logp)
        return Choice(response=actions, index=index, logp=logp, value=value,
                      scored=policy.scored_tokens(actions))
    return choose


def _forced_writer(policy: GenerationPolicy, own: Writer, forced: chex.Array) -> Writer:
    """`own` writer, but where forced [N] >= 0 the canonical response of that candidate
    (generation.scripted_writer: log-probs and value 0)."""
    expert = scripted_writer(policy.spec, lambda k, s, c, l: (forced, forced >= 0),
                             policy.pad_id)

    def writer(key, prompt, cands, legal, states):
        mine, theirs = (own(key, prompt, cands, legal, states),
                        expert(key, prompt, cands, legal, states))
        pick = lambda a, b: jnp.where(  # noqa: E731
            (forced >= 0).reshape((-1,) + (1,) * (a.ndim - 1)), b, a)
        return jax.tree.map(pick, mine[:4], theirs[:4]) + ({},)
    return writer


def chooser(policy: Policy, params: Any, greedy: bool = False,
            forced: Optional[chex.Array] = None) -> Chooser:
    """The actor's chooser (asct_jax.envs.play.Chooser): candidate scoring, or the
    generating actor's stateful chooser (its carry the prompt's history) writing with
    the model (KV-cached sampling, asct_jax.rl.generation.model_writer).

    forced: None, or [N] int32: where >= 0 that candidate is played in place of the
    actor's choice, with log-probs 0 (the expert's turns of the host games' warm start);
    the generating actor then writes the candidate's canonical response (value 0).
    """
    if generates(policy):
        writer = model_writer(policy, params, greedy)
        if forced is not None:
            writer = _forced_writer(policy, writer, forced)
        return GenerationChooser(policy.spec, writer, policy.pad_id)
    return candidate_chooser(policy, params, greedy, forced)


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
