"""TAC's Monte-Carlo targets: continuations of pi_old from checkpoints of each trajectory
(docs/methods.md, FACTOR > TAC critic).

Per trajectory, `checkpoint_turns` picks up to two checkpoints (one in each half); the
stored environment state x_t of each is restored and the frozen behaviour policy plays
M continuations of at most `horizon` further turns. A continuation that ends (done)
within the horizon is scored by the episode's outcome (the environment's info field:
success or score, or the return); the target of the checkpoint is the mean outcome of
its scored continuations, put in the reward coordinate of the trajectory's group
(`to_reward_coordinate`), and the trajectory's own raw outcome G if none was scored (the
authors' `realized_return=tr.terminal_reward`, factor/training/trainer.py update_critic;
it differs from the reward coordinate under "standardise", WebShop's rule).

Shapes: B trajectories, T turns, S = 2 checkpoint slots, M continuations.
"""
from __future__ import annotations

from typing import Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.play import play_from
from asct_jax.rl.credit import turn_states
from factor_jax.checkpoints import checkpoint_turns


@chex.dataclass(frozen=True)
class Continuations:
    """The continuations of one batch (in-step on JAX environments, or on the host as
    `Rollout.extras`). A pytree.

    Attributes:
      idx, valid: [B, S] int32 / bool, the checkpoint turns (checkpoint_turns).
      outcome: [B, S] float32, mean outcome of the scored continuations (raw, in the
        environment's outcome units; 0 where none).
      scored: [B, S] bool, at least one continuation of the checkpoint was scored.
      aux_tokens, env_calls: [] float32, the continuations' action tokens and steps.
    """

    idx: chex.Array
    valid: chex.Array
    outcome: chex.Array
    scored: chex.Array
    aux_tokens: chex.Array
    env_calls: chex.Array


def episode_outcome(env, env_params, state, outcome_key: str, prefix_return) -> chex.Array:
    """[] float32 outcome of an episode that reached `state`: its info field
    `outcome_key`, or ("return") the return, prefix_return plus what followed."""
    if outcome_key == "return":
        return jnp.asarray(prefix_return, jnp.float32)
    return jnp.asarray(env.info(state, env_params)[outcome_key], jnp.float32)


def continue_once(env, env_params, state, policy_fn, key, horizon: int, outcome_key: str,
                  prefix_return) -> Tuple[chex.Array, chex.Array, chex.Array, chex.Array]:
    """One continuation of pi_old from `state`, at most `horizon` turns.

    Returns (outcome [] f32, ended [] bool: the episode was done within the horizon,
    aux_tokens [] f32, env_calls [] i32)."""
    out = play_from(env, env_params, policy_fn, state, key, horizon, prefix_return)
    return (episode_outcome(env, env_params, out.state, outcome_key, out.ret), out.done,
            out.tokens, out.calls)


def continuation_outcomes(env, env_params, state, policy_fn, key, num: int, horizon: int,
                          outcome_key: str, prefix_return=0.0):
    """M = `num` continuations from one state: (mean outcome of the ended ones [] (0 if
    none), any ended [] bool, aux_tokens [] f32, env_calls [] i32)."""
    keys = jax.random.split(key, num)
    out, ended, tok, calls = jax.vmap(lambda k: continue_once(
        env, env_params, state, policy_fn, k, horizon, outcome_key, prefix_return))(keys)
    n = jnp.sum(ended)
    mean = jnp.sum(jnp.where(ended, out, 0.0)) / jnp.maximum(n, 1)
    return mean, n > 0, jnp.sum(tok), jnp.sum(calls)


def to_reward_coordinate(outcome: chex.Array, returns: chex.Array, group_size: int,
                         rule: str) -> chex.Array:
    """Outcomes [B, S] of continuations of trajectory i, in the reward coordinate of
    i's group: the identity for "leave_one_out" and "raw" (the terminal reward is G);
    for "standardise" the group's own standardisation (G - mu) / (sigma + 1e-8)
    (0 for a group with sigma < 1e-6), as the terminal reward A_seq is.

    Args:
      outcome: [B, S] float. returns: [B] float, the group's episode outcomes G.
    Returns:
      [B, S] float32.
    """
    chex.assert_rank([outcome, returns], [2, 1])
    if rule != "standardise":
        return outcome.astype(jnp.float32)
    b = returns.shape[0]
    g = returns.reshape(b // group_size, group_size).astype(jnp.float32)
    mu = jnp.repeat(jnp.mean(g, axis=1), group_size)[:, None]
    sigma = jnp.repeat(jnp.std(g, axis=1), group_size)[:, None]       # population std
    z = (outcome - mu) / (sigma + 1e-8)                                  # (G - mu) / (sigma + eps)
    return jnp.where(sigma < 1e-6, 0.0, z).astype(jnp.float32)


def outcome_targets(outcome: chex.Array, scored: chex.Array, returns: chex.Array,
                    group_size: int, rule: str) -> chex.Array:
    """What the critic is fitted to at states of trajectory i, from the mean outcome of
    continuations there, as the authors' TACModule.build_targets_for_trajectory:

      y = mean scored outcome, in the reward coordinate     (some continuation scored)
      y = G_i, the trajectory's raw outcome                 (none scored: the authors'
                                                             realized_return)

    Args:
      outcome: [B, S] float, the mean raw outcome of the scored continuations from S
        states of each trajectory. scored: [B, S] bool. returns: [B] float, G of each
        trajectory (its group's outcomes set the coordinate).
    Returns:
      [B, S] float32.
    """
    y = to_reward_coordinate(outcome, returns, group_size, rule)
    raw = returns.astype(jnp.float32)[:, None]
    return jnp.where(scored, y, raw)


def checkpoint_targets(cont: Continuations, returns: chex.Array, group_size: int,
                       rule: str) -> chex.Array:
    """[B, S] critic targets at the checkpoints (outcome_targets of cont's outcomes).

    Args:
      cont: the batch's Continuations. returns: [B] float, G of each trajectory.
    Returns:
      [B, S] float32.
    """
    return outcome_targets(cont.outcome, cont.scored, returns, group_size, rule)


def run_continuations(env, env_params, batch, policy_fn, key, num: int, horizon: int,
                      outcome_key: str) -> Continuations:
    """The continuations of a batch on a JAX-native environment (inside the step).

    Args:
      batch: the Rollout [B, T, ...] (its stored states).
      policy_fn: pi_old at one state: a StateActor (asct_jax.rl.credit.state_actor) or a
        PolicyFn state -> (logp [K], value []) (asct_jax.rl.credit.state_policy_fn).
    """
    b, t = batch.turn_mask.shape
    k_turns, k_roll = jax.random.split(key)
    idx, valid = checkpoint_turns(batch.turn_mask, k_turns)             # [B, S]
    s = idx.shape[1]
    states = jax.tree.map(lambda x: x.reshape((b * s,) + x.shape[2:]), turn_states(batch, idx))
    # The return before the checkpoint (an outcome "return" adds it to the continuation's).
    before = jnp.cumsum(jnp.where(batch.turn_mask, batch.rewards, 0.0), axis=1) - jnp.where(
        batch.turn_mask, batch.rewards, 0.0)
    prefix = jnp.take_along_axis(before, idx, axis=1).reshape(-1)
    keys = jax.random.split(k_roll, b * s)
    mean, any_ended, tok, calls = jax.vmap(lambda st, k, p: continuation_outcomes(
        env, env_params, st, policy_fn, k, num, horizon, outcome_key, p))(states, keys, prefix)
    v = valid.reshape(-1)
    return Continuations(
        idx=idx, valid=valid, outcome=jnp.where(valid, mean.reshape(b, s), 0.0),
        scored=valid & any_ended.reshape(b, s),
        aux_tokens=jnp.sum(jnp.where(v, tok, 0.0)).astype(jnp.float32),
        env_calls=jnp.sum(jnp.where(v, calls, 0)).astype(jnp.float32))
