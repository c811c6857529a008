"""ScienceWorld tasks (PyPI scienceworld; its jar runs on the machine's Java).

ScienceWorld has no state save, so recovery is reset + replay of the action prefix. When
the Java process dies, the adapter starts a new one, replays the live prefix and retries
the call, so no episode is lost.
"""
from __future__ import annotations

import contextlib
import logging
from typing import List, Optional, Sequence

from asct_jax.envs.external.base import HostEnv, LiveStep

SPLITS = ("train", "dev", "test")


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
    """Host adapter over one ScienceWorld task; reset(seed) plays variations[seed % n].

    Args:
      task: ScienceWorld task name, e.g. "find-non-living-thing" or "boil".
      variations: variation indices to draw from (default: all of `split`).
      split: "train", "dev" or "test" (used when `variations` is None).
      simplification: ScienceWorld simplification string ("easy" = all of them).
      max_turns: episodes end after this many steps.
      max_restarts: Java restarts allowed per call before giving up.
    """

    name = "scienceworld"
    info_keys = ("success", "score")

    def __init__(self, task: str = "find-non-living-thing",
                 variations: Optional[Sequence[int]] = None, split: str = "train",
                 simplification: str = "easy", max_turns: int = 50, max_restarts: int = 2):
        super().__init__(max_turns)
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}; pick one of them.")
        self.task, self.split, self.simplification = task, split, simplification
        self.variations = None if variations is None else [int(v) for v in variations]
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

            self._sw = _SW("", envStepLimit=10**9)
            self._loaded = None
            if self.task not in self._sw.get_task_names():
                raise ValueError(f"Unknown ScienceWorld task {self.task!r}; use one of "
                                 f"{sorted(self._sw.get_task_names())}.")
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
        self._score = float(int(round(100 * server.getScore())))
        completed = bool(server.getCompleted())
        self._done = completed or self._score < 0
        self._won = completed and self._score >= 100
        return text

    def _variations(self) -> List[int]:
        if self.variations is None:
            getter = {"train": "get_variations_train", "dev": "get_variations_dev",
                      "test": "get_variations_test"}[self.split]
            self._call(lambda sw: sw.load(self.task, 0, self.simplification))
            self._loaded = (self.task, 0)
            self.variations = list(self._call(lambda sw: getattr(sw, getter)()))
        return self.variations

    # --- backend hooks ------------------------------------------------------------------
    def _game_for(self, seed: int) -> str:
        vs = self._variations()
        return f"{self.task}:{vs[seed % len(vs)]}"

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
