"""ScienceWorld tasks (PyPI scienceworld; its jar runs on the machine's Java).

ScienceWorld has no state save, so recovery is reset + replay of the action prefix. When
the Java process dies, the adapter starts a new one, replays the live prefix and retries
the call, so no episode is lost.

Games are "task:variation" over one or several tasks (`task` a name or a sequence of
names), each task's variations of one split (train / dev / test, or `variations`, or the
first `num_variations` of the split); reset(seed) plays games[seed % len(games)], the
tasks interleaved (seed 0 is task 0's first variation, seed 1 task 1's first, ...).

Reward (`reward`): "success" (FACTOR's ScienceWorld rule, Super-MariOvO/FACTOR's reward construction: binary
success, 1 on the step that completes the task with score 100, else 0) or "score" (the
change in the 0-100 score, divided by 100). info["score"] is the game's score, a failed
task (negative score, e.g. a wrong "focus on") counted as 0, as the benchmark reports it.

The valid-action list (`legal_actions`, 70 ms a call) is cached per (game, action
prefix); `gold_path` is the simulator's gold action sequence of a game.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import List, Optional, Sequence, Union

from asct_jax.envs.external.base import HostEnv, HostState, LiveStep

SPLITS = ("train", "dev", "test")
REWARDS = ("success", "score")


@contextlib.contextmanager
def _quiet_py4j():
    """py4j logs a traceback for every failed connection; we handle them ourselves."""
    logger = logging.getLogger("py4j")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class ScienceWorldEnv(HostEnv):
    """Host adapter over ScienceWorld tasks (module docstring).

    Args:
      task: a ScienceWorld task name, e.g. "find-non-living-thing", or a sequence of them.
      variations: variation indices to draw from, the same for every task (default: the
        split's).
      split: "train", "dev" or "test" (used when `variations` is None).
      num_variations: keep the first n variations of each task (None: all).
      simplification: ScienceWorld simplification string ("easy" = all of them).
      max_turns: episodes end after this many steps.
      max_restarts: Java restarts allowed per call before giving up.
      reward: "success" or "score" (module docstring).
      legal_cache_size: states whose valid-action lists are kept.
      java_options: the JVM's options (its default heap, a quarter of the machine's
        memory, grew to ~0.8 GB per simulator; 26 of them filled 24 GB).
    """

    name = "scienceworld"
    info_keys = ("success", "score")

    def __init__(self, task: Union[str, Sequence[str]] = "find-non-living-thing",
                 variations: Optional[Sequence[int]] = None, split: str = "train",
                 simplification: str = "easy", max_turns: int = 50, max_restarts: int = 2,
                 reward: str = "success", num_variations: Optional[int] = None,
                 legal_cache_size: int = 4096,
                 java_options: str = "-Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"):
        super().__init__(max_turns)
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}; pick one of them.")
        if reward not in REWARDS:
            raise ValueError(f"reward={reward!r} is not one of {REWARDS}; pick one of them.")
        if num_variations is not None and int(num_variations) < 1:
            raise ValueError(f"num_variations={num_variations!r}: must be an int >= 1 or None.")
        self.tasks = (task,) if isinstance(task, str) else tuple(task)
        if not self.tasks:
            raise ValueError("task: got an empty sequence; name at least one ScienceWorld task.")
        self.task = self.tasks[0]
        self.split, self.simplification, self.reward = split, simplification, reward
        self.num_variations = None if num_variations is None else int(num_variations)
        self.legal_cache_size = int(legal_cache_size)
        self.java_options = str(java_options)
        self.variations = None if variations is None else [int(v) for v in variations]
        self._games: Optional[List[str]] = None
        self.max_restarts = int(max_restarts)
        self._sw = None  # scienceworld.ScienceWorldEnv (owns the Java process)
        self._loaded = None  # (task, variation) loaded in the live simulator
        self._trace = None  # (game, [actions]) the live simulator went through
        self._task_desc = ""
        self._score, self._done, self._won = 0.0, False, False

    # --- Java process -----------------------------------------------------------------
    @property
    def java_pid(self) -> Optional[int]:
        """Pid of the live Java process (None before the first reset)."""
        return None if self._sw is None else self._sw._gateway.java_process.pid

    def _jvm(self):
        if self._sw is None:
            from scienceworld import ScienceWorldEnv as _SW

            old = os.environ.get("JAVA_TOOL_OPTIONS")
            os.environ["JAVA_TOOL_OPTIONS"] = self.java_options   # read by this JVM's launch
            try:
                self._sw = _SW("", envStepLimit=10**9)
            finally:
                if old is None:
                    os.environ.pop("JAVA_TOOL_OPTIONS", None)
                else:
                    os.environ["JAVA_TOOL_OPTIONS"] = old
            self._loaded = None
            names = self._sw.get_task_names()
            for task in self.tasks:
                if task not in names:
                    raise ValueError(f"Unknown ScienceWorld task {task!r}; use one of "
                                     f"{sorted(names)}.")
        return self._sw

    def _kill(self) -> None:
        sw, self._sw, self._loaded = self._sw, None, None
        if sw is None:
            return
        proc = sw._gateway.java_process
        try:
            sw._gateway.shutdown()
        except Exception:  # the gateway of a dead process may fail to shut down
            pass
        sw.close = lambda: None  # ScienceWorldEnv.__del__ would talk to the dead gateway
        sw._gateway._gateway_client.is_connected = False  # and so would py4j's finalizers
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def _call(self, fn):
        """Run fn(sim); if the Java process died, restart it, replay the trace, retry."""
        from py4j.protocol import Py4JError, Py4JJavaError

        replay = None  # after a restart: the trace to replay before retrying fn
        for attempt in range(self.max_restarts + 1):
            try:
                with _quiet_py4j():
                    if replay is not None:
                        self._raw_reset(replay[0])
                        for a in replay[1]:
                            self._raw_step(a)
                    return fn(self._jvm())
            except Py4JJavaError:
                raise  # a genuine error inside the simulator, not a dead process
            except Py4JError as err:
                if attempt == self.max_restarts:
                    raise RuntimeError(
                        f"ScienceWorld's Java process died {attempt + 1} times ({err}); "
                        "check `java -version` (Java 11+ needed) and free memory.") from err
                self.stats["restarts"] += 1
                with _quiet_py4j():
                    self._kill()
                if self._trace is not None:
                    replay = (self._trace[0], list(self._trace[1]))

    def close(self) -> None:
        with _quiet_py4j():
            self._kill()
        self._live_key = None

    # --- raw simulator calls (no recovery) --------------------------------------------
    def _raw_reset(self, game: str) -> str:
        sw = self._jvm()
        task, variation = game.rsplit(":", 1)
        if self._loaded != (task, int(variation)):
            sw.load(task, int(variation), self.simplification)
            self._loaded = (task, int(variation))
        sw.server.reset()
        return self._raw_step("look around")

    def _raw_step(self, action: str) -> str:
        server = self._sw.server
        text = server.step(action)
        raw = float(int(round(100 * server.getScore())))
        completed = bool(server.getCompleted())
        self._done = completed or raw < 0
        self._won = completed and raw >= 100
        self._score = max(raw, 0.0)   # a failed task scores 0
        return text

    def _variations(self, task: str) -> List[int]:
        if self.variations is not None:
            return self.variations
        getter = {"train": "get_variations_train", "dev": "get_variations_dev",
                  "test": "get_variations_test"}[self.split]
        self._call(lambda sw: sw.load(task, 0, self.simplification))
        self._loaded, self._live_key = (task, 0), None
        found = list(self._call(lambda sw: getattr(sw, getter)()))
        return found[:self.num_variations] if self.num_variations else found

    @property
    def games(self) -> List[str]:
        """The games "task:variation" reset(seed) draws from, tasks interleaved."""
        if self._games is None:
            per_task = [[f"{t}:{v}" for v in self._variations(t)] for t in self.tasks]
            n = max(len(g) for g in per_task)
            self._games = [g[i] for i in range(n) for g in per_task if i < len(g)]
        return self._games

    def gold_path(self, game: str) -> List[str]:
        """The simulator's gold action sequence of `game` ("task:variation")."""
        task, variation = game.rsplit(":", 1)

        def gold(sw):
            sw.load(task, int(variation), self.simplification, generateGoldPath=True)
            return [str(a) for a in sw.get_gold_action_sequence()]
        out = self._call(gold)
        self._loaded, self._live_key = None, None   # reload (without the gold path) next time
        return out

    def walkthrough(self, state: HostState) -> List[str]:
        """The gold path of the state's game (asct_jax.rl.host_tokenizer.game_texts)."""
        return self.gold_path(state.game)

    # --- backend hooks ------------------------------------------------------------------
    def _game_for(self, seed: int) -> str:
        return self.games[seed % len(self.games)]

    def _reward(self, before: HostState, live: LiveStep) -> float:
        if self.reward == "success":
            return float(live.won and not before.won)
        return (live.score - before.score) / 100.0

    def _task(self) -> str:
        return self._task_desc

    def _live(self, text: str) -> LiveStep:
        return LiveStep(text=text, score=self._score, done=self._done, won=self._won)

    def _start(self, game: str, seed: int) -> LiveStep:
        self._trace = None  # nothing to replay while resetting
        text = self._call(lambda sw: self._raw_reset(game))
        self._task_desc = self._call(lambda sw: sw.server.getTaskDescription())
        self._trace = (game, [])
        return self._live(text)

    def _advance(self, action: str, replay: bool = False) -> LiveStep:
        text = self._call(lambda sw: self._raw_step(action))
        self._trace[1].append(action)
        return self._live(text)

    def _legal(self) -> List[str]:
        return sorted(str(a) for a in self._call(
            lambda sw: sw.server.getValidActionObjectCombinations()))
