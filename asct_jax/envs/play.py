"""The one loop that plays multi-turn episodes of a JAX-native environment, whoever
chooses the actions: batched from reset (`play`), or ONE episode played on from a restored
state (`play_from`). Both step a turn with `step_turn` and ask one actor protocol.

    choice = chooser(key, states, ts, cands, legal, costs)     # one turn of N episodes
    eps = play(env, env_params, chooser, key, num_groups, group_size)   # [B, T] record
    eps = play(..., question_ids=qids)      # group g plays question qids[g] (QuestionEnv)
    choice, carry = actor.act(state, key, carry)                # one turn of ONE episode
    out = play_from(env, env_params, actor, state, key, max_turns)      # [] totals

One lax.scan over T = env.max_turns turns of a vmapped batch of B episodes: each turn
lists the candidates (cands [N, K, A] int32, legal [N, K] bool, costs [N, K] float32),
asks the chooser for the actions (a `Choice`), steps the environment and records the
turn (`RECORD`). A chooser closes over what it needs (a policy and its params, a scripted
expert); its key is the turn's slice of the scanned keys. An action need not be one of
the candidates (generated text, which the environment parses): its index is then -1.

`play_from` is a lax.while_loop over at most max_turns turns of ONE episode from a
restored state (VinePPO's and FACTOR's continuations, the search's leaf evaluations): its
actor is a `StateActor`, the chooser's per-state view (its Choice has no batch axis); an
optional `Recorder` keeps per-turn fields (the search's ledger Trace).

Episodes come in groups of G sharing their reset key (`group_reset_keys`), episode i in
group i // G; the state carries its own PRNG key, so a group also shares the
environment's randomness and its episodes differ only by the chooser's actions.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from asct_jax.envs.base import PAD_ID, Environment, TimeStep
from asct_jax.envs.questions import reset_question

# Per-turn fields of Episodes.record ([B, T, ...], see asct_jax.rl.types.Rollout).
RECORD = ("obs", "feedback", "responses", "action_index", "token_mask", "turn_mask",
          "logp_old", "values", "rewards", "penalties", "dones", "cand_tokens",
          "cand_mask", "cand_costs", "states")


@chex.dataclass(frozen=True)
class Choice:
    """A chooser's answer for one turn of N episodes.

    response: [N, A] int32, the chosen candidate's tokens or the written response; index:
    [N] int32, its candidate (-1: none); logp: [N, A] float32 or None (zeros), log-probs of
    the response tokens; value: [N] float32 or None (zeros), the chooser's value of x_t;
    extra: dict of [N, ...] arrays, stacked to [B, T, ...] as they are (Episodes.extra); scored: [N, A] bool or None (every
    non-PAD token), the tokens that carry the log-prob and the loss (token_mask);
    env_actions: [N, A_env] int32 or None (= response), what the environment receives when
    `response` is a generated response (its projection); penalty: [N] float32 or None,
    subtracted from the step's reward (an invalid generated action's); tokens: [N] float32
    or None, the action's token cost (read by `play_from` only).
    """

    response: chex.Array
    index: chex.Array
    logp: Any = None
    value: Any = None
    scored: Any = None
    extra: Dict[str, chex.Array] = dataclasses.field(default_factory=dict)
    env_actions: Any = None
    penalty: Any = None
    tokens: Any = None


# (key, states, ts, cands, legal, costs) -> Choice; or a stateful chooser, an object with
# init(batch, obs_len, action_len) -> carry and
# __call__(key, states, ts, cands, legal, costs, carry) -> (Choice, carry)
# (asct_jax.rl.generation.GenerationChooser: its carry is the prompt's history).
Chooser = Callable[..., Choice]


@dataclasses.dataclass(frozen=True)
class StateActor:
    """The chooser's per-state view: an actor at ONE restored state (what `play_from`,
    and so VinePPO's rollouts, FACTOR's continuations and the search's leaf evaluations,
    play with).

    init(state) -> carry: what the actor remembers at the restored state (the generating
      actor's prompt history, empty there; () for a candidate sampler).
    act(state, key, carry) -> (Choice of ONE episode: response [A] ([A_env] env_actions if
      set), penalty [] f32 or None, tokens [] f32 the action's token cost, extra {}; carry).
    """

    init: Callable[[Any], Any]
    act: Callable[..., Tuple[Choice, Any]]


# ONE state -> (logp [K] over its candidates, value []): pi_old at a restored state.
PolicyFn = Callable[[Any], Tuple[chex.Array, chex.Array]]


class Turn(NamedTuple):
    """One turn stepped (`step_turn`): state and ts after it, penalty the actor's ([]
    or [N] f32, 0 if none). The turn's reward is ts.reward - penalty."""

    state: Any
    ts: TimeStep
    penalty: chex.Array


class Recorder(NamedTuple):
    """Per-turn fields `play_from` keeps: init() -> rec; update(rec, t, choice, turn) ->
    rec, at turn t [] i32 with the actor's Choice and the stepped Turn."""

    init: Callable[[], Any]
    update: Callable[..., Any]


class Played(NamedTuple):
    """What `play_from` returns ([] each): the final state, ret = start_return + sum of
    rewards f32, tokens the actions' token costs f32, calls the steps i32, done bool, rec
    the Recorder's (() without one)."""

    state: Any
    ret: chex.Array
    tokens: chex.Array
    calls: chex.Array
    done: chex.Array
    rec: Any


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
    return Choice(response=take_candidates(cands, index), index=index)


def sample_candidate(key: chex.PRNGKey, logp: chex.Array, legal: chex.Array) -> chex.Array:
    """[] int32 k ~ softmax(logp [K]) restricted to the legal candidates (any candidate if
    none is legal, which makes an ordinary "nothing happens" step)."""
    logits = jnp.where(legal, logp, -jnp.inf)
    logits = jnp.where(jnp.any(legal & jnp.isfinite(logits)), logits, jnp.zeros_like(logp))
    return jax.random.categorical(key, logits).astype(jnp.int32)


def candidate_actor(env: Environment, env_params: Any, policy_fn: PolicyFn) -> StateActor:
    """pi_old over the legal candidates as a StateActor: a ~ pi_old(.|s)
    (sample_candidate), its candidate tokens sent, its action cost counted."""

    def act(state, key, carry):
        cands, legal = env.legal_actions(state, env_params)
        logp, _ = policy_fn(state)
        a = sample_candidate(key, logp, legal)
        cost = env.action_costs(state, env_params)[a]
        return Choice(response=cands[a], index=a, penalty=jnp.float32(0.0),
                      tokens=jnp.asarray(cost, jnp.float32)), carry

    return StateActor(init=lambda state: (), act=act)


def as_actor(env: Environment, env_params: Any, actor: Any) -> StateActor:
    """A StateActor as it is, a PolicyFn as its candidate_actor."""
    return actor if isinstance(actor, StateActor) else candidate_actor(env, env_params, actor)


def state_done(env: Environment, state: Any, env_params: Any) -> chex.Array:
    """[] bool: the state's own done flag (`state.done`) or, for environments whose state
    names it otherwise, "no legal candidate"."""
    done = getattr(state, "done", None)
    if done is None:
        _, legal = env.legal_actions(state, env_params)
        return ~jnp.any(legal)
    return jnp.asarray(done, bool)


def rekey_state(state: Any, key: chex.PRNGKey) -> Any:
    """The state with its own PRNG key (`state.key`) replaced by a fresh one."""
    if not (hasattr(state, "key") and hasattr(state, "replace")):
        raise ValueError("rekey=True needs an environment state with a `key` field")
    return state.replace(key=jax.random.split(key)[0])


def step_turn(env: Environment, env_params: Any, state: Any, choice: Choice) -> Turn:
    """The environment stepped with ONE episode's Choice (vmap it over a batch): its
    env_actions (else its response) sent; the penalty 0 where the actor has none."""
    env_actions = choice.response if choice.env_actions is None else choice.env_actions
    new_state, ts = env.step(state, env_actions, env_params)
    penalty = jnp.zeros_like(ts.reward) if choice.penalty is None else choice.penalty
    return Turn(new_state, ts, penalty)


def turn_record(live, obs, feedback, responses, index, scored, logp, value, reward, penalty,
                done, cands, legal, costs, acted=None, xp=jnp) -> Dict[str, Any]:
    """The RECORD fields of one turn of N episodes (all but states): what the actor chose
    and the environment answered, masked to the live episodes. Shared by `play` (xp = jnp)
    and the host games' loop (asct_jax.rl.host_rollout, xp = numpy).

    live [N] bool, the episode ran this turn; acted [N] bool (default live), it sent an
    action; obs [N, O]; feedback [N, F]; responses [N, A]; index [N] i32; scored [N, A] bool,
    the tokens that carry the loss; logp [N, A]; value [N]; reward [N] the environment's;
    penalty [N] the actor's; done [N] bool after the step; cands [N, K, A_c]; legal, costs
    [N, K]. rewards = reward - penalty and penalties = penalty on the live episodes, 0
    elsewhere (asct_jax.rl.types.Rollout).
    """
    acted = live if acted is None else acted
    token_mask = scored & acted[:, None]
    return dict(
        obs=obs, feedback=feedback, responses=responses, action_index=xp.where(acted, index, -1),
        token_mask=token_mask, turn_mask=live, logp_old=xp.where(token_mask, logp, 0.0),
        values=value, rewards=xp.where(live, reward - penalty, 0.0),   # r_t - penalty
        penalties=xp.where(live, penalty, 0.0), dones=done & live, cand_tokens=cands,
        cand_mask=legal, cand_costs=costs)


def play_from(env: Environment, env_params: Any, actor: Any, state: Any, key: chex.PRNGKey,
              max_turns: int, start_return=0.0, recorder: Optional[Recorder] = None
              ) -> Played:
    """ONE episode played on from a restored `state` until done or `max_turns` turns.

    actor: a StateActor, or a PolicyFn (its candidate_actor). Per turn `key, sub =
    split(key)` and the actor acts with sub; a turn's reward is the environment's minus the
    actor's penalty. recorder: per-turn fields to keep (Played.rec), or None.
    """
    actor = as_actor(env, env_params, actor)

    def cond(c):
        _, _, _, _, done, t, _, _, _ = c
        return (~done) & (t < max_turns)

    def body(c):
        s, g, tok, calls, _, t, k, carry, rec = c
        k, sub = jax.random.split(k)
        choice, carry = actor.act(s, sub, carry)
        turn = step_turn(env, env_params, s, choice)
        if recorder is not None:
            rec = recorder.update(rec, t, choice, turn)
        # (G + r) - penalty, in this order (the stored runs' float operations)
        return (turn.state, g + turn.ts.reward - turn.penalty, tok + choice.tokens,
                calls + 1, jnp.asarray(turn.ts.done, bool), t + 1, k, carry, rec)

    init = (state, jnp.asarray(start_return, jnp.float32), jnp.float32(0.0), jnp.int32(0),
            state_done(env, state, env_params), jnp.int32(0), key, actor.init(state),
            () if recorder is None else recorder.init())
    s, g, tok, calls, done, _, _, _, rec = jax.lax.while_loop(cond, body, init)
    return Played(s, g, tok, calls, done, rec)


def play(env: Environment, env_params: Any, chooser: Chooser, key: chex.PRNGKey,
         num_groups: int, group_size: int, pad_id: int = PAD_ID,
         question_ids: Optional[chex.Array] = None) -> Episodes:
    """B = num_groups * group_size episodes; key -> (reset key, turn key), the turn key
    split into T per-turn chooser keys. question_ids: [num_groups] i32, the question each
    group plays (a QuestionEnv, asct_jax.envs.questions), or None: env.reset draws it."""
    reset_key, turn_key = jax.random.split(key)
    qids = None if question_ids is None else jnp.repeat(
        jnp.asarray(question_ids, jnp.int32), group_size, axis=0)
    return play_keys(env, env_params, chooser, group_reset_keys(reset_key, num_groups, group_size),
                     jax.random.split(turn_key, env.max_turns), pad_id, group_size, qids)


def reset_batch(env: Environment, env_params: Any, reset_keys: chex.Array,
                question_ids: Optional[chex.Array] = None):
    """(states, ts) [B] of B = len(reset_keys) episodes: env.reset, or with question_ids
    [B] i32 each episode's question (asct_jax.envs.questions.reset_question), its state
    carrying its reset key."""
    if question_ids is None:
        return jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)
    chex.assert_shape(question_ids, reset_keys.shape[:1])
    return jax.vmap(lambda k, q: reset_question(env, k, q, env_params))(reset_keys, question_ids)


def play_keys(env: Environment, env_params: Any, chooser: Chooser, reset_keys: chex.Array,
              turn_keys: Any, pad_id: int = PAD_ID, group_size: int = 1,
              question_ids: Optional[chex.Array] = None) -> Episodes:
    """The loop: B = len(reset_keys) episodes; turn_keys [T, ...] (a pytree), turn t's
    slice is the chooser's key; pad_id: the action token that is not one (token_mask);
    question_ids: [B] i32 or None (`reset_batch`)."""
    states, ts = reset_batch(env, env_params, reset_keys, question_ids)
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
        logp = jnp.zeros(c.response.shape, jnp.float32) if c.logp is None else c.logp
        value = jnp.zeros((batch,), jnp.float32) if c.value is None else c.value
        sent = Choice(response=c.response, index=c.index, env_actions=c.env_actions,
                      penalty=c.penalty)
        new_states, new_ts, penalty = jax.vmap(
            lambda s, ch: step_turn(env, env_params, s, ch))(states, sent)
        scored = (c.response != pad_id) if c.scored is None else c.scored
        out = turn_record(~done, ts.observation, new_ts.feedback, c.response, c.index, scored,
                          logp, value, new_ts.reward, penalty, new_ts.done, cands, legal,
                          costs)
        out["states"] = states
        return ((new_states, new_ts, done | new_ts.done, ret + out["rewards"], memory),
                (out, c.extra))

    init = (states, ts, jnp.zeros((batch,), bool), jnp.zeros((batch,), jnp.float32), memory)
    (_, final, _, returns, _), traj = jax.lax.scan(turn, init, turn_keys)
    record, extra = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), traj)   # [T, B] -> [B, T]
    return Episodes(record=record, extra=extra, final=final, returns=returns,
                    group=jnp.arange(batch) // group_size,
                    env_calls=jnp.sum(record["turn_mask"]).astype(jnp.int32))
