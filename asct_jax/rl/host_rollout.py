"""Rollouts of the policy in real text games driven on the host (TextWorld, ...).

The mirror of `asct_jax.rl.rollout.rollout` for `BatchedHostEnv`: the games run in Python,
the policy in one jitted call per turn on fixed shapes, and the batch is the same
`Rollout` ([B, T, ...] arrays, same masks and semantics), so `make_learn_step` and every
credit method that needs no environment restore inside the step (GRPO, PPO, FACTOR
and its baselines) train on it unchanged. `host_rollout_from` plays on from stored states (FACTOR's
TAC continuations, factor_jax.host_continuations).

    tok = build_tokenizer(game_texts(games))        # asct_jax.rl.host_tokenizer
    shape = HostShape(max_turns=T, obs_len=O, feedback_len=F, action_len=A,
                      max_candidates=K)
    batch, host_states = host_rollout(policy, params, BatchedHostEnv(envs), tok, seeds,
                                      shape, group_size=G, key=key)

Per turn, for every game still running:
  * x_t = its observation text, encoded by the codec (asct_jax.rl.host_text; the last O
    tokens are kept);
  * its admissible commands, cut to the game set's candidate rule when one is given
    (`select(commands, task, game, turn)`, e.g. ScienceWorld's VerbQuotaRule), become
    candidate token sequences (words, then EOS, then PAD up to A), at most K of them
    (CommandEncoder.candidates: a deterministic cut that keeps the commands that change
    the game);
  * the actor chooses: the jitted chooser the JAX-native rollout plays
    (asct_jax.rl.actor.chooser, over the kept commands): pi_old scores all candidates
    (Policy.candidate_log_probs) and one is sampled; its text is sent to the game.
The loop keeps only the host's part (encoding the texts, stepping the games, the
records). A generating actor (asct_jax.rl.actor.generates) writes its turn
instead: the prompt lists the kept commands and the last k steps, the response ([B, T, R]
actions, its prompt in `prompts`, `action_mask`, the gen/ statistics) is projected onto
them in jit; a valid one sends its command, an invalid one is penalised by
invalid_penalty (in `rewards`, and in `penalties` for GRPO / GiGPO and kin, see
`Rollout`) and the game receives what verl-agent would send (`written_command`).
Games that are done are no longer stepped: their turns have turn_mask False, all-PAD
candidates with cand_mask False, action_index -1, zero rewards and log-probs.
`states` is None (host states are not arrays); the HostStates of every turn are returned
beside the batch for restore-based methods.
"""
from __future__ import annotations

import dataclasses
import weakref
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax.envs.external.base import BatchedHostEnv, HostState
from asct_jax.envs.play import turn_record
from asct_jax.rl import actor
from asct_jax.rl.host_text import CommandEncoder, as_codec, task_text, written_command
from asct_jax.rl.types import Rollout

# select(commands, task, game, turn) -> the commands kept as candidates (a candidate rule).
Select = Callable[[List[str], str, str, int], List[str]]
FALLBACK_COMMAND = "look"  # sent when a running game lists no usable command


@dataclasses.dataclass(frozen=True)
class HostShape:
    """The fixed shapes of a host rollout (the scoring call compiles once for them).

    max_turns T (an episode still running after T turns is cut, not done); obs_len O
    (the last O observation tokens are kept); feedback_len F; action_len A (words, EOS,
    PAD); max_candidates K (admissible commands kept per turn).
    """

    max_turns: int
    obs_len: int
    feedback_len: int
    action_len: int
    max_candidates: int


# ----------------------------------------------------------------------------- the choice

_CHOOSERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _chooser(policy, greedy: bool):
    """Jitted (params, obs [N, O], cands [N, K, A], legal [N, K], carry, key, forced [N])
    -> (Choice, carry): the turn of the N games chosen by the actor's chooser
    (asct_jax.rl.actor.chooser, what the JAX-native rollout plays), over the games' kept
    commands; where forced >= 0 that candidate is played (the warm start's expert turns,
    log-prob 0). carry: the chooser's (the generating actor's prompt history), () for a
    stateless one."""
    per_policy = _CHOOSERS.setdefault(policy, {})
    if greedy not in per_policy:
        def turn(params, obs, cands, legal, carry, key, forced):
            choose = actor.chooser(policy, params, greedy, forced)
            ts = SimpleNamespace(observation=obs)
            if hasattr(choose, "init"):
                return choose(key, None, ts, cands, legal, None, carry)
            return choose(key, None, ts, cands, legal, None), carry
        per_policy[greedy] = jax.jit(turn)
    return per_policy[greedy]


# ----------------------------------------------------------------------------- rollout

def host_rollout(policy, params: Any, host_env: BatchedHostEnv, tokenizer, seeds: Sequence[int],
                 shape: HostShape, *, group_size: int, key, greedy: bool = False,
                 encoder: Optional[CommandEncoder] = None, select: Optional[Select] = None
                 ) -> Tuple[Rollout, List[List[HostState]]]:
    """Plays B = len(seeds) * group_size episodes, episode i on game seed seeds[i // G].

    Args:
      policy, params: the actor (Policy) and its parameters (pi_old).
      host_env: B host environments (BatchedHostEnv), one per episode.
      tokenizer: the games' word-level tokenizer (build_tokenizer: PAD 0, EOS 1), or a
        ChatCodec (a pretrained model's tokenizer and chat template).
      seeds: the game seed of each group.
      shape: T, O, F, A, K (HostShape).
      key: PRNG key of the candidate sampling (turn t uses fold_in(key, t)).
      greedy: argmax instead of sampling.
      encoder: a CommandEncoder to reuse (its cache and drop counters); built if None.
      select: the candidate rule (commands, task, game, turn) -> commands, or None.
    Returns:
      (batch, host_states): batch a Rollout with [B, T, ...] arrays and states=None;
      host_states[i] the HostStates x_0 .. x_T of episode i (x_{t+1} = x_t once done).
    """
    b = len(seeds) * int(group_size)
    if b != len(host_env):
        raise ValueError(f"host_rollout: len(seeds) * group_size = {len(seeds)} x "
                         f"{group_size} = {b} episodes but host_env has {len(host_env)} "
                         "environments; pass one environment per episode.")
    ep_seeds = [int(seeds[i // group_size]) for i in range(b)]
    states, steps = host_env.reset(ep_seeds)
    return _play(policy, params, host_env, tokenizer, states, [ts.info for ts in steps],
                 int(group_size), shape, key=key, greedy=greedy, encoder=encoder,
                 select=select)


def host_rollout_from(policy, params: Any, host_env: BatchedHostEnv, tokenizer,
                      states: Sequence[HostState], shape: HostShape, *, key,
                      greedy: bool = False, encoder: Optional[CommandEncoder] = None,
                      select: Optional[Select] = None
                      ) -> Tuple[Rollout, List[List[HostState]]]:
    """`host_rollout` continued from stored states (restored by the games): episode i
    plays on from states[i] until the game ends or its own max_turns is reached (or T
    more turns). Group size 1. Used for TAC continuations (factor_jax.host_continuations).
    """
    if len(states) != len(host_env):
        raise ValueError(f"host_rollout_from: {len(states)} states but host_env has "
                         f"{len(host_env)} environments; pass one environment per state.")
    states = list(states)
    return _play(policy, params, host_env, tokenizer, states, host_env.info(states), 1,
                 shape, key=key, greedy=greedy, encoder=encoder, select=select)


def concat_rollouts(parts: Sequence[Rollout], keep: Optional[int] = None) -> Rollout:
    """Rollouts [B_i, T, ...] joined along the batch (env_calls summed, each episode its own
    group), cut to the first `keep` episodes (env_calls then counts those)."""
    def join(*xs):
        return jnp.concatenate(xs) if jnp.ndim(xs[0]) else sum(xs)
    out = jax.tree.map(join, *parts)
    if keep is not None and keep < out.turn_mask.shape[0]:
        out = jax.tree.map(lambda x: x[:keep] if jnp.ndim(x) else x, out)
        out = out.replace(env_calls=jnp.asarray(int(out.turn_mask.sum()), jnp.int32))
    return out.replace(group=jnp.arange(out.turn_mask.shape[0], dtype=jnp.int32))


def _play(policy, params, host_env, tokenizer, states, infos, group_size, shape: HostShape,
          *, key, greedy, encoder, select=None, force=None):
    """The turn loop of host_rollout from `states` (infos: their step infos).

    force: None, or force(states) -> a command (or None) per game: that command is played
    instead of the policy's choice (made a candidate if the cut dropped it; its logp_old
    is 0) and the call returns a third value, forced [B, T] bool (the expert's turns of
    a warm start's episodes: asct_jax.rl.host_warm_start).
    """
    b = len(states)
    obs_len, feedback_len = shape.obs_len, shape.feedback_len
    codec = as_codec(tokenizer)
    pad = codec.pad_id
    if encoder is None or encoder.action_len != shape.action_len:
        encoder = CommandEncoder(codec, shape.action_len)
    t_max, k_max, a_len = int(shape.max_turns), int(shape.max_candidates), int(shape.action_len)
    choose = _chooser(policy, bool(greedy))
    generate = actor.generates(policy)   # its response is written text (projected)
    spec = actor.generation_spec(policy)
    first = actor.chooser(policy, params, bool(greedy))     # its carry at the first turn
    carry = first.init(b, obs_len, a_len) if hasattr(first, "init") else ()
    r_len = int(spec.response_len) if generate else a_len

    host_states = [[s] for s in states]
    info_keys = list(infos[0])
    final_info = {k: np.array([info[k] for info in infos], np.float32) for k in info_keys}
    done = np.array([s.done for s in states], bool)

    out = {
        "obs": np.full((b, t_max, obs_len), pad, np.int32),
        "feedback": np.full((b, t_max, feedback_len), pad, np.int32),
        "responses": np.full((b, t_max, r_len), pad, np.int32),
        "action_index": np.full((b, t_max), -1, np.int32),
        "token_mask": np.zeros((b, t_max, r_len), bool),
        "turn_mask": np.zeros((b, t_max), bool),
        "logp_old": np.zeros((b, t_max, r_len), np.float32),
        "values": np.zeros((b, t_max), np.float32),
        "rewards": np.zeros((b, t_max), np.float32),
        "penalties": np.zeros((b, t_max), np.float32),
        "dones": np.zeros((b, t_max), bool),
        "cand_tokens": np.full((b, t_max, k_max, a_len), pad, np.int32),
        "cand_mask": np.zeros((b, t_max, k_max), bool),
        "cand_costs": np.zeros((b, t_max, k_max), np.float32),
    }
    forced = np.zeros((b, t_max), bool)
    gen_out: Dict[str, np.ndarray] = {}
    for t in range(t_max):
        live = ~done
        if not live.any():
            break
        legal_text = host_env.legal_actions(states)  # [] for done games (no restore)
        if select is not None:
            legal_text = [select(c, task_text(s), s.game, s.turn) if c else c
                          for c, s in zip(legal_text, states)]
        obs = codec.observations([s.observation for s in states], obs_len)
        cands = np.full((b, k_max, a_len), pad, np.int32)
        legal = np.zeros((b, k_max), bool)
        kept: List[List[str]] = []
        for i in range(b):
            cmds, toks = encoder.candidates(legal_text[i], k_max) if live[i] else ([], [])
            kept.append(cmds)
            if toks:
                cands[i, :len(toks)] = np.asarray(toks, np.int32)
                legal[i, :len(toks)] = True
        forced_index = np.full(b, -1, np.int32)
        for i, cmd in enumerate(force(states) if force is not None else []):
            toks = encoder(cmd) if cmd is not None and live[i] else None
            if toks is None:
                continue
            same = np.flatnonzero(legal[i] & np.all(cands[i] == np.asarray(toks), axis=-1))
            j = int(same[0]) if same.size else min(len(kept[i]), k_max - 1)
            if not same.size:
                kept[i] = kept[i][:j] + [cmd]
                cands[i, j], legal[i, j] = toks, True
            kept[i][j] = cmd
            forced_index[i], forced[i, t] = j, True
        has_cand = legal.any(axis=1)
        choice, carry = choose(params, obs, cands, legal, carry, jax.random.fold_in(key, t),
                               forced_index)
        choice = jax.device_get(choice)
        index, logp, value = (np.asarray(choice.index), np.asarray(choice.logp),
                              np.asarray(choice.value))
        chosen, scored = np.asarray(choice.response), np.asarray(choice.scored)
        if generate:   # a valid response plays its command, an invalid one what it wrote
            valid = index >= 0
            texts = [("" if not live[i] else kept[i][index[i]] if valid[i] else
                      written_command(chosen[i], scored[i], codec, spec)) for i in range(b)]
            acted = live
            penalty = np.where(live & ~valid, spec.invalid_penalty, 0.0)
            for k, v in choice.extra.items():
                if k not in gen_out:
                    gen_out[k] = np.zeros((b, t_max) + np.shape(v)[1:], np.asarray(v).dtype)
                gen_out[k][:, t] = v
        else:          # a game with no usable command gets the fallback (no action)
            texts = [kept[i][index[i]] if live[i] and has_cand[i]
                     else (FALLBACK_COMMAND if live[i] else "") for i in range(b)]
            acted = live & has_cand
            penalty = np.zeros(b)
        new_states, new_steps = host_env.step(states, texts)

        step_done = np.array([ts.done for ts in new_steps], bool)
        feedback = codec.feedback([ts.feedback if live[i] else ""
                                   for i, ts in enumerate(new_steps)], feedback_len)
        record = turn_record(live, obs, feedback, np.where(acted[:, None], chosen, pad), index,
                             scored, logp, value, np.asarray([ts.reward for ts in new_steps]),
                             penalty, step_done, cands, legal,
                             np.sum(cands != pad, axis=-1).astype(np.float32), acted=acted,
                             xp=np)
        for k, v in record.items():
            out[k][:, t] = v
        for i in np.flatnonzero(live):
            for k in info_keys:
                final_info[k][i] = new_steps[i].info[k]
        states = [new_states[i] if live[i] else states[i] for i in range(b)]
        done = done | (step_done & live)
        for i in range(b):
            host_states[i].append(states[i])
    for i in range(b):  # pad to x_0 .. x_T
        host_states[i].extend([host_states[i][-1]] * (t_max + 1 - len(host_states[i])))

    if generate:   # the prompts, the action tokens and the gen/ statistics (Rollout)
        turns = out["turn_mask"]
        gen = {"prompts": jnp.asarray(gen_out.pop("prompts")),
               "action_mask": jnp.asarray(gen_out.pop("action_mask") & out["token_mask"]),
               "turn_info": {k: jnp.asarray(np.where(turns, v, 0.0))
                             for k, v in gen_out.items() if k.startswith("gen/")}}
    else:
        gen = {}
    batch = Rollout(
        **{k: jnp.asarray(v) for k, v in out.items()}, **gen,
        states=None,
        final_info={k: jnp.asarray(v) for k, v in final_info.items()},
        group=jnp.arange(b, dtype=jnp.int32) // group_size,
        env_calls=jnp.asarray(int(out["turn_mask"].sum()), jnp.int32),
    )
    if force is not None:
        return batch, host_states, forced & out["turn_mask"]
    return batch, host_states
