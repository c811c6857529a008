"""TAC's continuations (factor_jax.continuations) on real games driven on the host.

The JAX environments continue from checkpoints inside the jitted credit step
(factor_jax.continuations.run_continuations). Host games cannot be stepped from inside
jit, so the same computation runs here, between the rollout and the learn step: pick the
checkpoints (factor_jax.checkpoint_turns), play M continuations of pi_old from each
stored state (the games restore from their save blob, else reset + replay), score the
ones that ended within the horizon, and hand the result, a `Continuations`, to the
credit in `Rollout.extras`. Environment calls and action tokens are counted.

The outcome of a host game is its return (the rewards before the checkpoint plus the
continuation's), FACTOR's "return" outcome.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import factor_jax as fj
from asct_jax.envs.external.base import HostState
from asct_jax.rl.types import Rollout
from factor_jax.continuations import Continuations

# play(states, key) -> Rollout of pi_old continued from `states` (always `chunk` states).
PlayFrom = Callable[[Sequence[HostState], jax.Array], Rollout]


def host_continuations(play: PlayFrom, batch: Rollout, host_states: List[List[HostState]],
                       key: jax.Array, num: int, horizon: int, chunk: int) -> Continuations:
    """M = `num` continuations of at most `horizon` turns from each checkpoint.

    Args:
      play: plays pi_old on from `chunk` host states (host_rollout_from).
      batch: the Rollout [B, T, ...] the states belong to.
      host_states: host_states[i][t] = x_t of episode i (as host_rollout returns them).
      key: PRNG key (checkpoint choice and the continuations' sampling).
      chunk: how many states one `play` call takes (the number of environments); the
        last call is filled up with finished states, which are never stepped.
    Returns:
      Continuations(idx, valid, outcome, scored [B, 2], aux_tokens, env_calls).
    """
    b, _ = batch.turn_mask.shape
    k_turns, k_roll = jax.random.split(key)
    idx, valid = jax.device_get(fj.checkpoint_turns(batch.turn_mask, k_turns))
    rewards = np.asarray(jnp.where(batch.turn_mask, batch.rewards, 0.0))
    slots = [(i, s) for i in range(b) for s in range(idx.shape[1]) if valid[i, s]]
    starts = [host_states[i][int(idx[i, s])] for i, s in slots for _ in range(num)]
    outcome = np.zeros(len(starts), np.float32)
    ended = np.zeros(len(starts), bool)
    calls = tokens = 0
    for c0 in range(0, len(starts), chunk):
        part = starts[c0:c0 + chunk]
        n = len(part)
        # Fill the last chunk with finished copies (never stepped): one shape, one compile.
        part = part + [dataclasses.replace(part[0], done=True)] * (chunk - n)
        out = play(part, jax.random.fold_in(k_roll, c0))
        live = np.asarray(out.turn_mask[:n, :horizon])
        outcome[c0:c0 + n] = np.sum(np.asarray(out.rewards[:n, :horizon]) * live, axis=1)
        ended[c0:c0 + n] = np.any(np.asarray(out.dones[:n, :horizon]) & live, axis=1)
        calls += int(live.sum())                 # one environment step per real turn
        tokens += int(np.sum(np.asarray(out.token_mask[:n, :horizon]) & live[..., None]))
    mean = np.zeros(idx.shape, np.float32)
    scored = np.zeros(idx.shape, bool)
    for n, (i, s) in enumerate(slots):
        e = ended[n * num:(n + 1) * num]
        prefix = rewards[i, :int(idx[i, s])].sum()
        if e.any():
            mean[i, s] = prefix + outcome[n * num:(n + 1) * num][e].mean()
            scored[i, s] = True
    return Continuations(idx=jnp.asarray(idx), valid=jnp.asarray(valid),
                         outcome=jnp.asarray(mean), scored=jnp.asarray(scored),
                         aux_tokens=jnp.float32(tokens), env_calls=jnp.float32(calls))


def continue_on_host(fc, play: PlayFrom, batch: Rollout,
                     host_states: List[List[HostState]], key: jax.Array,
                     chunk: int) -> Continuations:
    """`host_continuations` with the FactorConfig's M and horizon: the
    `Method.host_prepare` of the FACTOR methods."""
    return host_continuations(play, batch, host_states, key, fc.continuations, fc.horizon,
                              chunk)
