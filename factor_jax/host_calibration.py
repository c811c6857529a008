"""FACTOR's value calibration (docs/methods.md, FACTOR > Value calibration) on real games driven on the host.

The JAX environments calibrate inside the jitted credit step (factor_jax.methods.calibrate):
restore the stored state of a few intermediate turns, roll pi_old out M times, use the
mean return-to-go as the value target there. Host games cannot be stepped from inside
jit, so the same computation runs here, between the rollout and the learn step:

    idx, valid = factor_jax.calibration_turns(turn_mask, key, K)        # [B, K]
    G^(m)(x_t) = sum_{t' >= t} r^(m)_t'   for m = 1..M rollouts of pi_old from x_t
    target(x_t) = (1/M) sum_m G^(m)(x_t)                                 # [B, T]

and the result, a `Calibration`, travels in `Rollout.extras`, which FACTOR reads instead of
calibrating itself. The restored rollouts are played B at a time on the training games'
environments (the games restore from their save blob, else reset + replay). Environment
calls and action tokens of the calibration rollouts are counted.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import factor_jax as fj
from asct_jax.envs.external.base import HostState
from asct_jax.rl.types import Rollout
from factor_jax.calibration import Calibration

# play(states, key) -> Rollout of pi_old continued from `states` (always `chunk` states).
PlayFrom = Callable[[Sequence[HostState], jax.Array], Rollout]


def host_calibrate(play: PlayFrom, batch: Rollout, host_states: List[List[HostState]],
                   key: jax.Array, num_turns: int, num_rollouts: int,
                   chunk: int) -> Calibration:
    """Monte-Carlo value targets at `num_turns` intermediate turns of every episode.

    Args:
      play: plays pi_old on from `chunk` host states (host_rollout_from).
      batch: the Rollout [B, T, ...] the states belong to.
      host_states: host_states[i][t] = x_t of episode i (as host_rollout returns them).
      key: PRNG key (turn choice and the rollouts' sampling).
      num_turns, num_rollouts: K turns per episode, M rollouts per turn.
      chunk: how many states one `play` call takes (the number of environments); the
        last call is filled up with finished states, which are never stepped.
    Returns:
      Calibration(targets [B, T] f32, mask [B, T] bool, aux_tokens [] f32,
      env_calls [] f32), the `Rollout.extras` FACTOR reads.
    """
    b, t = batch.turn_mask.shape
    k_turns, k_roll = jax.random.split(key)
    idx, valid = jax.device_get(fj.calibration_turns(batch.turn_mask, k_turns, num_turns))
    slots = [(i, s) for i in range(b) for s in range(idx.shape[1]) if valid[i, s]]
    starts = [host_states[i][int(idx[i, s])] for i, s in slots for _ in range(num_rollouts)]
    returns = np.zeros(len(starts), np.float32)
    calls = tokens = 0
    for c0 in range(0, len(starts), chunk):
        part = starts[c0:c0 + chunk]
        n = len(part)
        # Fill the last chunk with finished copies (never stepped): one shape, one compile.
        part = part + [dataclasses.replace(part[0], done=True)] * (chunk - n)
        out = play(part, jax.random.fold_in(k_roll, c0))
        returns[c0:c0 + n] = np.asarray(jnp.sum(out.rewards[:n], axis=1))
        calls += int(jnp.sum(out.turn_mask[:n]))      # one environment step per real turn
        tokens += int(jnp.sum(out.token_mask[:n]))
    mc = np.zeros(idx.shape + (num_rollouts,), np.float32)   # [B, K, M]
    for n, (i, s) in enumerate(slots):
        mc[i, s] = returns[n * num_rollouts:(n + 1) * num_rollouts]
    targets, mask = fj.calibration_targets(jnp.asarray(idx), jnp.asarray(valid),
                                           jnp.asarray(mc), t)
    return Calibration(targets=targets, mask=mask, aux_tokens=jnp.float32(tokens),
                       env_calls=jnp.float32(calls))


def calibrate_on_host(fc, play: PlayFrom, batch: Rollout,
                      host_states: List[List[HostState]], key: jax.Array,
                      chunk: int) -> Optional[Calibration]:
    """`host_calibrate` with the FactorConfig's turns and rollouts (None when either is
    0): the `Method.host_prepare` of the FACTOR methods."""
    if fc.calib_turns <= 0 or fc.calib_rollouts <= 0:
        return None
    return host_calibrate(play, batch, host_states, key, fc.calib_turns, fc.calib_rollouts,
                          chunk)
