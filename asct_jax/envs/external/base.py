"""Host-side environment protocol for real text games (not jittable).

Mirror of `asct_jax.envs.base` for games that run in Python or a subprocess:

    state, ts = env.reset(seed)
    cmds = env.legal_actions(state)           # admissible commands, list[str]
    state, ts = env.step(state, "take apple")
    env.restore(state)                        # put the live game back into `state`

* `HostState` is a small picklable record; `step` and `legal_actions` accept any state
  of this environment: the adapter restores the live game first when it is elsewhere
  (from the backend's native save blob when it has one, else by reset + replay).
* An unknown command is an ordinary step (the game answers it); after `done`, `step`
  is absorbing (state unchanged, reward 0, done True).
* The step's reward is the change in the game's score (`_reward`; an adapter may use
  another rule, e.g. ScienceWorld's binary success).
* `legal_actions` of a state already asked about is answered from a cache (the games are
  deterministic in the action prefix) without restoring the live game, when the adapter
  sets `legal_cache_size` > 0 (stats: legal_hits / legal_misses).
"""
from __future__ import annotations

import dataclasses
import collections
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class HostState:
    """Where an episode is: enough to restore the live game.

    Attributes:
      game: game id (a game file or "task:variation").
      seed: the seed passed to reset.
      actions: the action prefix taken since reset.
      turn: len(actions).
      done: episode over (won, lost or max_turns reached).
      score: the game's score after the prefix.
      won: the episode ended in success.
      observation: the observation text at this state (returned again by absorbing steps).
      native: the backend's save blob (pickled bytes), or None (restore by replay).
    """

    game: str
    seed: int
    actions: Tuple[str, ...] = ()
    turn: int = 0
    done: bool = False
    score: float = 0.0
    won: bool = False
    observation: str = ""
    native: Optional[bytes] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def key(self) -> Tuple[str, int, Tuple[str, ...]]:
        return (self.game, self.seed, self.actions)


@dataclasses.dataclass(frozen=True)
class HostTimeStep:
    """What the agent sees: texts instead of tokens (see `encode`).

    info has the same keys at every step of an environment, always "success" and "score".
    """

    observation: str
    feedback: str
    reward: float
    done: bool
    info: Dict[str, float]


@dataclasses.dataclass
class LiveStep:
    """What a backend reports after resetting or advancing its live game."""

    text: str  # the game's answer (intro text after reset)
    score: float
    done: bool  # the game itself ended (won or lost)
    won: bool
    native: Optional[bytes] = None


class HostEnv:
    """Base class. Subclasses implement the `_` methods; episode logic lives here."""

    name: str = "host"
    max_turns: int = 50
    info_keys: Tuple[str, ...] = ("success", "score")
    legal_cache_size: int = 0   # states whose legal actions are kept (LRU); 0: no cache

    def __init__(self, max_turns: int = 50):
        self.max_turns = int(max_turns)
        self._live_key = None  # HostState.key of the live game, None when unknown
        self._legal_cache: "collections.OrderedDict" = collections.OrderedDict()
        self.stats = {"native_restores": 0, "replays": 0, "forward_replays": 0,
                      "replayed_steps": 0, "restarts": 0, "legal_hits": 0, "legal_misses": 0}

    # --- backend hooks --------------------------------------------------------------
    def _game_for(self, seed: int) -> str:
        raise NotImplementedError

    def _task(self) -> str:
        """Task text of the live game, prefixed to every observation."""
        raise NotImplementedError

    def _start(self, game: str, seed: int) -> LiveStep:
        raise NotImplementedError

    def _advance(self, action: str, replay: bool = False) -> LiveStep:
        """Run one command on the live game (replay=True: only the game state matters)."""
        raise NotImplementedError

    def _legal(self) -> List[str]:
        raise NotImplementedError

    def _restore_native(self, state: HostState) -> bool:
        """Load state.native into the live game; False when there is no native restore."""
        return False

    def _extra_info(self) -> Dict[str, float]:
        return {}

    def _reward(self, before: HostState, live: LiveStep) -> float:
        """The reward of the step from `before` to `live`: the change in score."""
        return float(live.score - before.score)

    # --- protocol -------------------------------------------------------------------
    def reset(self, seed: int) -> Tuple[HostState, HostTimeStep]:
        game = self._game_for(int(seed))
        live = self._start(game, int(seed))
        obs = self._observation(live.text)
        state = HostState(game=game, seed=int(seed), score=float(live.score),
                          done=bool(live.done), won=bool(live.won), observation=obs,
                          native=live.native)
        self._live_key = state.key
        return state, HostTimeStep(obs, "", 0.0, state.done, self._info(live.won, live.score))

    def step(self, state: HostState, action: str) -> Tuple[HostState, HostTimeStep]:
        if state.done:
            return state, HostTimeStep(state.observation, "", 0.0, True,
                                       self._info(state.won, state.score))
        self.restore(state)
        action = str(action).strip()
        self._live_key = None   # unknown until the step returns (it may raise)
        live = self._advance(action)
        turn = state.turn + 1
        done = bool(live.done) or turn >= self.max_turns
        obs = self._observation(live.text)
        new = HostState(game=state.game, seed=state.seed, actions=state.actions + (action,),
                        turn=turn, done=done, score=float(live.score), won=bool(live.won),
                        observation=obs,
                        native=live.native)
        self._live_key = new.key
        info = self._info(live.won, live.score)
        return new, HostTimeStep(obs, live.text, self._reward(state, live), done, info)

    def legal_actions(self, state: HostState) -> List[str]:
        if state.done:
            return []
        if self.legal_cache_size <= 0:
            self.restore(state)
            return list(self._legal())
        cache, key = self._legal_cache, (state.game, state.actions)
        if key in cache:
            self.stats["legal_hits"] += 1
            cache.move_to_end(key)
            return list(cache[key])
        self.stats["legal_misses"] += 1
        self.restore(state)
        cache[key] = tuple(self._legal())
        if len(cache) > self.legal_cache_size:
            cache.popitem(last=False)
        return list(cache[key])

    def info(self, state: HostState) -> Dict[str, float]:
        """The info a step into `state` reported (the game of `state` is loaded when the
        adapter reads extra info from the live game)."""
        if type(self)._extra_info is not HostEnv._extra_info:
            self.restore(state)
        return self._info(state.won, state.score)

    def restore(self, state: HostState) -> None:
        """Put the live game into `state`: nothing when it is there; the missing steps when
        the live game is at an earlier state of the same episode; else the native blob
        when possible, else reset + replay."""
        live, self._live_key = self._live_key, None
        if live == state.key:
            self._live_key = live
            return
        n = 0 if live is None else len(live[2])
        if (live is not None and live[:2] == state.key[:2] and n < len(state.actions)
                and state.actions[:n] == live[2]):
            for a in state.actions[n:]:          # the games are deterministic in the prefix
                self._advance(a, replay=True)
            self.stats["forward_replays"] += 1
            self.stats["replayed_steps"] += len(state.actions) - n
        elif state.native is not None and self._restore_native(state):
            self.stats["native_restores"] += 1
        else:
            self._replay(state)
        self._live_key = state.key

    def _replay(self, state: HostState) -> None:
        self._live_key = None
        self.stats["replays"] += 1
        self._start(state.game, state.seed)
        for a in state.actions:
            self._advance(a, replay=True)
        self.stats["replayed_steps"] += len(state.actions)
        self._live_key = state.key

    def close(self) -> None:
        pass

    # --- helpers --------------------------------------------------------------------
    def _observation(self, text: str) -> str:
        return f"{self._task().strip()}\n\n{text.strip()}"

    def _info(self, won: bool, score: float) -> Dict[str, float]:
        info = {"success": float(bool(won)), "score": float(score)}
        info.update(self._extra_info())
        return {k: float(info[k]) for k in self.info_keys}


class BatchedHostEnv:
    """Several host environments driven together (list in, list out)."""

    def __init__(self, envs: Sequence[HostEnv]):
        if not envs:
            raise ValueError("BatchedHostEnv got no environments; pass a non-empty list.")
        self.envs = list(envs)

    def __len__(self) -> int:
        return len(self.envs)

    @property
    def max_turns(self) -> int:
        return max(e.max_turns for e in self.envs)

    @property
    def stats(self) -> Dict[str, int]:
        """The environments' counters summed (restores, replays, valid-action cache)."""
        out: Dict[str, int] = {}
        for e in self.envs:
            for k, v in e.stats.items():
                out[k] = out.get(k, 0) + int(v)
        return out

    def _check(self, xs, what: str):
        if len(xs) != len(self.envs):
            raise ValueError(f"{what} has {len(xs)} entries for {len(self.envs)} environments; "
                             "pass one per environment.")

    def reset(self, seeds: Sequence[int]):
        self._check(seeds, "seeds")
        out = [e.reset(s) for e, s in zip(self.envs, seeds)]
        return [o[0] for o in out], [o[1] for o in out]

    def step(self, states: Sequence[HostState], actions: Sequence[str]):
        self._check(states, "states")
        self._check(actions, "actions")
        out = [e.step(s, a) for e, s, a in zip(self.envs, states, actions)]
        return [o[0] for o in out], [o[1] for o in out]

    def legal_actions(self, states: Sequence[HostState]) -> List[List[str]]:
        self._check(states, "states")
        return [e.legal_actions(s) for e, s in zip(self.envs, states)]

    def info(self, states: Sequence[HostState]) -> List[Dict[str, float]]:
        self._check(states, "states")
        return [e.info(s) for e, s in zip(self.envs, states)]

    def restore(self, states: Sequence[HostState]) -> None:
        self._check(states, "states")
        for e, s in zip(self.envs, states):
            e.restore(s)

    def close(self) -> None:
        for e in self.envs:
            e.close()


def encode(texts: Sequence[str], tokenizer, length: int) -> np.ndarray:
    """Token ids [N, length] int32 of `texts`: long texts keep their last `length` tokens,
    short ones are right-padded with the tokenizer's pad id (0 when it has none)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = np.full((len(texts), int(length)), pad, np.int32)
    for i, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids[len(ids) - int(length):] if len(ids) > int(length) else ids
        out[i, :len(ids)] = ids
    return out
