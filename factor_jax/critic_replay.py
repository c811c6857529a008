"""TAC's critic fed (factor_jax.critic holds the head, its replay and its steps): a
batch's continuations from its checkpoints -> Monte-Carlo targets of the outcome G pushed
into the replay at the boundary features of those turns (replay_targets: every FACTOR
credit step, factor_jax.methods.factor_pieces), the outcome and the features it reads
(run_outcome_rule, episode_outcomes, batch_features), and factor.critic_start "prefit"
(this project's option): the critic fitted before step 1 (fit_critic_first, FACTOR's
Method.make_prefit). `fc` is the run's factor_jax.methods.FactorConfig.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

import factor_jax as fj
from asct_jax.infra.checks import ConfigError
from asct_jax.rl import advantages as adv
from asct_jax.rl.credit import CreditContext, state_actor
from asct_jax.rl.types import Rollout, policy_inputs
from asct_jax.rl.types import merge_batch_turns as _flat
from factor_jax import critic as tac_critic
from factor_jax.continuations import Continuations, checkpoint_targets, run_continuations


def run_outcome_rule(fc, env) -> tuple:
    """(reward rule, outcome key) of the run: the config's, else the env's
    (fj.OUTCOME_RULES; env None on host games)."""
    rule, outcome = fj.outcome_rule(getattr(env, "name", ""))
    return (rule if fc.reward_rule == "auto" else fc.reward_rule,
            outcome if fc.outcome == "auto" else fc.outcome)


def episode_outcomes(batch: Rollout, outcome: str):
    """[B] G: the info field `outcome` at the end of each episode, or the return."""
    if outcome == "return":
        return adv.episode_returns(batch.rewards, batch.turn_mask)
    if outcome not in batch.final_info:
        raise ValueError(f"factor.outcome: the environment's info has no {outcome!r} "
                         f"(it has {sorted(batch.final_info)}); set factor.outcome")
    return batch.final_info[outcome].astype(jnp.float32)


def batch_features(ctx: CreditContext, params, batch: Rollout):
    """[B, T, H] stop-gradient boundary features of every x_t."""
    b, t = batch.turn_mask.shape
    f = ctx.policy.features(params, _flat(policy_inputs(batch)))
    return f.reshape(b, t, -1)


def continuations(fc, ctx: CreditContext, params, batch: Rollout, key,
                  outcome: str) -> Continuations:
    """The batch's continuations: from the host (batch.extras) or run here."""
    if batch.extras is not None:
        return batch.extras
    return run_continuations(ctx.env, ctx.env_params, batch, state_actor(ctx, params),
                             key, fc.continuations, fc.horizon, outcome)


def replay_targets(fc, ctx: CreditContext, params, batch: Rollout, k_cont,
                   k_push, g, critic_state):
    """A batch's critic targets pushed into the replay: continuations from its
    checkpoints -> Monte-Carlo targets [B, S] at the boundary features of those turns.

    g: [B] the outcome G. Returns (cont, feats [B, T, H] of every x_t, targets [B, S],
    the critic state with them in its replay)."""
    rule, outcome = run_outcome_rule(fc, ctx.env)
    cont = continuations(fc, ctx, params, batch, k_cont, outcome)
    feats = batch_features(ctx, params, batch)                         # [B, T, H]
    targets = checkpoint_targets(cont, g, ctx.group_size, rule)        # [B, S]
    at = jnp.take_along_axis(feats, cont.idx[..., None], axis=1)       # [B, S, H]
    critic_state = tac_critic.push(critic_state, k_push, at.reshape(-1, at.shape[-1]),
                                   targets.reshape(-1), cont.valid.reshape(-1))
    return cont, feats, targets, critic_state


def fit_critic_first(fc, ctx: CreditContext):
    """Method.make_prefit of FACTOR: None under factor.critic_start "warmup" (the
    authors'); under "prefit" (ours) the critic fitted before step 1:

      prefit_batches x (rollout of pi_0 -> continuations -> MC targets into the replay)
      -> prefit_critic_steps critic-only Adam steps on 3/4 of them (the target head = the
      fitted head; the held-out quarter measures it, then joins the replay).

    prefit(params, critic_state, key, collect) -> (critic_state, metrics): the env calls
    and aux tokens of the rollouts and continuations, and tac_critic.prefit's fit."""
    if fc.critic_start != "prefit":
        return None
    if ctx.env is None:
        raise ConfigError("factor.critic_start", "'prefit' plays its rollouts in-step on "
                          "a JAX-native environment; host games have none", "warmup")

    def prefit(params, critic_state, key, collect):
        _, outcome = run_outcome_rule(fc, ctx.env)

        def one_batch(state, key):
            k_roll, k_cont, k_push = jax.random.split(key, 3)
            batch = collect(params, k_roll)
            g = episode_outcomes(batch, outcome)
            cont, _, _, state = replay_targets(fc, ctx, params, batch, k_cont, k_push, g,
                                               state)
            calls = batch.env_calls.astype(jnp.float32) + cont.env_calls
            return state, (calls, cont.aux_tokens)

        k_batches, k_fit = jax.random.split(key)
        critic_state, (calls, tokens) = jax.lax.scan(
            one_batch, critic_state, jax.random.split(k_batches, fc.prefit_batches))
        critic_state, m = tac_critic.prefit(critic_state, k_fit, fc.critic_lr,
                                            fc.critic_sample, fc.prefit_critic_steps)
        return critic_state, {"env_calls": jnp.sum(calls), "aux_tokens": jnp.sum(tokens),
                              **m}
    return prefit
