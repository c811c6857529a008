"""The one loop that plays batched multi-turn episodes of a JAX-native environment,
whoever chooses the actions.

    choice = chooser(key, states, ts, cands, legal, costs)     # one turn of N episodes
    eps = play(env, env_params, chooser, key, num_groups, group_size)   # [B, T] record

One lax.scan over T = env.max_turns turns of a vmapped batch of B episodes: each turn
lists the candidates (cands [N, K, A] int32, legal [N, K] bool, costs [N, K] float32),
asks the chooser for the actions (a `Choice`), steps the environment and records the
turn (`RECORD`). A chooser closes over what it needs (a policy and its params, a scripted
expert); its key is the turn's slice of the scanned keys. An action need not be one of
the candidates (generated text, which the environment parses): its index is then -1.

Episodes come in groups of G sharing their reset key (`group_reset_keys`), episode i in
group i // G; the state carries its own PRNG key, so a group also shares the
environment's randomness and its episodes differ only by the chooser's actions.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import PAD_ID, Environment, TimeStep

# Per-turn fields of Episodes.record ([B, T, ...], see asct_jax.rl.types.Rollout).
RECORD = ("obs", "feedback", "actions", "action_index", "token_mask", "turn_mask",
          "logp_old", "values", "rewards", "dones", "cand_tokens", "cand_mask",
          "cand_costs", "states")


@chex.dataclass(frozen=True)
class Choice:
    """A chooser's answer for one turn of N episodes.

    actions: [N, A] int32 action tokens; index: [N] int32, their candidate (-1: none);
    logp: [N, A] float32 or None (zeros), log-probs of the action tokens; value: [N]
    float32 or None (zeros), the chooser's value of x_t; extra: dict of [N, ...] arrays,
    stacked to [B, T, ...] as they are (Episodes.extra); scored: [N, A] bool or None (every
    non-PAD token), the tokens that carry the log-prob and the loss (token_mask);
    env_actions: [N, A_env] int32 or None (= actions), what the environment receives when
    `actions` are a generated response (its projection); penalty: [N] float32 or None,
    subtracted from the step's reward (an invalid generated action's).
    """

    actions: chex.Array
    index: chex.Array
    logp: Any = None
    value: Any = None
    scored: Any = None
    extra: Dict[str, chex.Array] = dataclasses.field(default_factory=dict)
    env_actions: Any = None
    penalty: Any = None


# (key, states, ts, cands, legal, costs) -> Choice; or a stateful chooser, an object with
# init(batch, obs_len, action_len) -> carry and
# __call__(key, states, ts, cands, legal, costs, carry) -> (Choice, carry)
# (asct_jax.rl.generation.GenerationChooser: its carry is the prompt's history).
Chooser = Callable[..., Choice]


@chex.dataclass(frozen=True)
class Episodes:
    """What `play` returns.

    record: dict of [B, T, ...], the RECORD fields (asct_jax.rl.types.Rollout has them).
    extra: dict of [B, T, ...], the chooser's Choice.extra.
    final: TimeStep [B], after the last turn.
    returns: [B] float32, the rewards summed turn by turn.
    group: [B] int32, the group (reset key) of each episode.
    env_calls: [] int32, environment steps taken by live episodes.
    """

    record: Dict[str, Any]
    extra: Dict[str, chex.Array]
    final: TimeStep
    returns: chex.Array
    group: chex.Array
    env_calls: chex.Array


def group_reset_keys(key: chex.PRNGKey, num_groups: int, group_size: int) -> chex.Array:
    """[num_groups * group_size] reset keys, each repeated G times (contiguous groups)."""
    keys = jax.random.split(key, num_groups)
    return jnp.repeat(keys, group_size, axis=0)


def take_candidates(x: chex.Array, index: chex.Array) -> chex.Array:
    """x [N, K, ...] at index [N] -> [N, ...]."""
    idx = index.reshape(index.shape + (1,) * (x.ndim - 1))
    return jnp.take_along_axis(x, idx, axis=1)[:, 0]


def uniform_index(key: chex.PRNGKey, legal: chex.Array) -> chex.Array:
    """[N] int32: a uniformly random legal candidate of each row of legal [N, K]."""
    return jax.random.categorical(key, jnp.where(legal, 0.0, -1e9), axis=-1)


def uniform_chooser(key, states, ts, cands, legal, costs) -> Choice:
    """A uniformly random legal candidate per episode (one key for the batch)."""
    index = uniform_index(key, legal)
    return Choice(actions=take_candidates(cands, index), index=index)


def play(env: Environment, env_params: Any, chooser: Chooser, key: chex.PRNGKey,
         num_groups: int, group_size: int, pad_id: int = PAD_ID) -> Episodes:
    """B = num_groups * group_size episodes; key -> (reset key, turn key), the turn key
    split into T per-turn chooser keys."""
    reset_key, turn_key = jax.random.split(key)
    return play_keys(env, env_params, chooser, group_reset_keys(reset_key, num_groups, group_size),
                     jax.random.split(turn_key, env.max_turns), pad_id, group_size)


def play_keys(env: Environment, env_params: Any, chooser: Chooser, reset_keys: chex.Array,
              turn_keys: Any, pad_id: int = PAD_ID, group_size: int = 1) -> Episodes:
    """The loop: B = len(reset_keys) episodes; turn_keys [T, ...] (a pytree), turn t's
    slice is the chooser's key; pad_id: the action token that is not one (token_mask)."""
    states, ts = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)
    batch = reset_keys.shape[0]
    stateful = hasattr(chooser, "init")
    memory = chooser.init(batch, env.obs_len, env.action_len) if stateful else ()

    def turn(carry, key_t):
        states, ts, done, ret, memory = carry
        cands, legal = jax.vmap(env.legal_actions, in_axes=(0, None))(states, env_params)
        costs = jax.vmap(env.action_costs, in_axes=(0, None))(states, env_params)
        if stateful:
            c, memory = chooser(key_t, states, ts, cands, legal, costs, memory)
        else:
            c = chooser(key_t, states, ts, cands, legal, costs)
        logp = jnp.zeros(c.actions.shape, jnp.float32) if c.logp is None else c.logp
        value = jnp.zeros((batch,), jnp.float32) if c.value is None else c.value
        env_actions = c.actions if c.env_actions is None else c.env_actions
        new_states, new_ts = jax.vmap(env.step, in_axes=(0, 0, None))(
            states, env_actions, env_params)
        live = ~done
        scored = (c.actions != pad_id) if c.scored is None else c.scored
        token_mask = scored & live[:, None]
        reward = new_ts.reward if c.penalty is None else new_ts.reward - c.penalty
        rewards = jnp.where(live, reward, 0.0)
        out = dict(
            obs=ts.observation, feedback=new_ts.feedback, actions=c.actions,
            action_index=jnp.where(live, c.index, -1), token_mask=token_mask, turn_mask=live,
            logp_old=jnp.where(token_mask, logp, 0.0), values=value, rewards=rewards,
            dones=new_ts.done & live, cand_tokens=cands, cand_mask=legal, cand_costs=costs,
            states=states)
        return (new_states, new_ts, done | new_ts.done, ret + rewards, memory), (out, c.extra)

    init = (states, ts, jnp.zeros((batch,), bool), jnp.zeros((batch,), jnp.float32), memory)
    (_, final, _, returns, _), traj = jax.lax.scan(turn, init, turn_keys)
    record, extra = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), traj)   # [T, B] -> [B, T]
    return Episodes(record=record, extra=extra, final=final, returns=returns,
                    group=jnp.arange(batch) // group_size,
                    env_calls=jnp.sum(record["turn_mask"]).astype(jnp.int32))
