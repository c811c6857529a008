"""ALFWorld (TextWorld-based household tasks): needs its game data, which this machine
cannot download. Without the data the adapter fails with one message saying what to get.

With the data, games (game.tw-pddl) are played through TextWorld's PDDL backend and
recovered by reset + replay. This path is not exercised by the tests (no data here).
"""
from __future__ import annotations

import glob
import os
from typing import Optional

from asct_jax.envs.external.base import LiveStep
from asct_jax.envs.external.textworld_env import TextWorldBackend

ENV_VAR = "ALFWORLD_DATA"
DEFAULT_PATH = os.path.join("~", ".cache", "alfworld")
SPLITS = ("train", "valid_seen", "valid_unseen")


def data_error(path: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"ALFWorld data not found under {path!r} (no json_2.1.1/*/**/game.tw-pddl): on a "
        f"machine with network run `pip install alfworld && alfworld-download` and copy "
        f"the resulting folder here, or pass data_path= / set ${ENV_VAR}.")


class AlfWorldEnv(TextWorldBackend):
    """Host adapter over ALFWorld games; reset(seed) plays games[seed % len(games)]."""

    name = "alfworld"
    info_keys = ("success", "score")

    def __init__(self, data_path: Optional[str] = None, split: str = "valid_seen",
                 max_turns: int = 50):
        super().__init__(max_turns)
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}; pick one of them.")
        path = os.path.expanduser(data_path or os.environ.get(ENV_VAR) or DEFAULT_PATH)
        self.games = sorted(glob.glob(os.path.join(path, "json_2.1.1", split, "**",
                                                   "game.tw-pddl"), recursive=True))
        if not self.games:
            raise data_error(path)
        self._env, self._gs = None, None

    def _game_for(self, seed: int) -> str:
        return self.games[seed % len(self.games)]

    def _task(self) -> str:
        return ""  # ALFWorld states the goal in the intro text

    def _live(self, text: str) -> LiveStep:
        won = bool(self._gs["won"])
        return LiveStep(text=text, score=float(won), done=won or bool(self._gs["lost"]), won=won)

    def _start(self, game: str, seed: int) -> LiveStep:
        import textworld

        if self._env is not None:
            self._env.close()
        wrappers = []
        try:  # ALFWorld's demangler gives objects their readable names ("apple 1")
            from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

            wrappers = [AlfredDemangler()]
        except ImportError:
            pass
        infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, feedback=True)
        self._env = textworld.start(game, request_infos=infos, wrappers=wrappers)
        self._gs = self._env.reset()
        return self._live(self._gs["feedback"])

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env, self._live_key = None, None
