"""TextWorld games (tw-cooking, generated offline by experiments/harness/make_textworld_games.py).

Recovery uses the Jericho save state: every HostState carries the z-machine state plus
TextWorld's logical game state (the facts behind the admissible commands), so restoring
turn k costs a set_state instead of a replay.
"""
from __future__ import annotations

import glob
import os
import pickle
import re
import warnings
from typing import Dict, List, Sequence, Union

from asct_jax.envs.external.base import HostEnv, HostState, LiveStep

_BANNER = re.compile(r"^[\s_|\\/$<>=-]*$")  # lines of the ASCII-art title


def clean_text(text: str) -> str:
    """Drop TextWorld's ASCII-art banner, the '>' prompt and runs of blank lines."""
    lines = [ln.rstrip() for ln in (text or "").splitlines()]
    lines = [ln for ln in lines if not (ln.strip() and _BANNER.match(ln))]
    text = re.sub(r"(^|\n)>[^\n]*$", "", "\n".join(lines).strip())  # prompt + status line
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def find_games(path: Union[str, Sequence[str]]) -> List[str]:
    """Sorted .z8 game files from a directory, a glob, a file or a list of files."""
    if not isinstance(path, str):
        return [str(p) for p in path]
    if os.path.isdir(path):
        return sorted(glob.glob(os.path.join(path, "*.z8")))
    return sorted(glob.glob(path)) if any(c in path for c in "*?[") else [path]


class TextWorldBackend(HostEnv):
    """What every game run through `textworld.start` shares: `self._env` the running
    game, `self._gs` its last GameState (feedback, admissible commands, won / lost)."""

    _env = None
    _gs = None

    def _advance(self, action: str, replay: bool = False) -> LiveStep:
        self._gs, _, _ = self._env.step(action)
        return self._live(self._gs["feedback"])

    def _legal(self) -> List[str]:
        return list(self._gs["admissible_commands"] or [])


class TextWorldEnv(TextWorldBackend):
    """Host adapter over TextWorld .z8 games; reset(seed) plays games[seed % len(games)]."""

    name = "textworld"
    info_keys = ("success", "score", "max_score")

    def __init__(self, games: Union[str, Sequence[str]], max_turns: int = 50):
        super().__init__(max_turns)
        self.games = find_games(games)
        if not self.games:
            raise FileNotFoundError(
                f"No TextWorld games (*.z8) at {games!r}; generate them with "
                "`python -m experiments.harness.make_textworld_games --config.out=DIR`.")
        for g in self.games:
            if not (os.path.isfile(g) and os.path.isfile(os.path.splitext(g)[0] + ".json")):
                raise FileNotFoundError(
                    f"TextWorld game {g!r} or its .json is missing; regenerate it with "
                    "`python -m experiments.harness.make_textworld_games`.")
        self._envs: Dict[str, object] = {}  # game file -> textworld env (loaded once)
        self._env = None
        self._game = None

    # --- backend --------------------------------------------------------------------
    def _game_for(self, seed: int) -> str:
        return self.games[seed % len(self.games)]

    def _load(self, game: str):
        if game not in self._envs:
            import textworld

            infos = textworld.EnvInfos(admissible_commands=True, objective=True,
                                       max_score=True, won=True, lost=True, score=True,
                                       moves=True, feedback=True, extras=["walkthrough"])
            with warnings.catch_warnings():  # Jericho: "not fully supported" (TextWorld scores)
                warnings.filterwarnings("ignore", message=".*not fully supported")
                env = textworld.start(game, request_infos=infos)
                env.reset()
            self._envs[game] = env
        self._env, self._game = self._envs[game], game
        return self._env

    def _tracker(self):
        return self._env._wrapped_env  # TWInform7 -> StateTracking

    def _task(self) -> str:
        return self._gs["objective"] or ""

    def _extra_info(self):
        return {"max_score": float(self._gs["max_score"] or 0)}

    def _native(self) -> bytes:
        tracker = self._tracker()
        blob = {
            "z": tracker.unwrapped._jericho.get_state(),
            "facts": [f.serialize() for f in tracker._game_progression.state.facts],
            "moves": tracker._moves,
            "score": self._gs["score"],
            "won": self._gs["won"], "lost": self._gs["lost"],
        }
        return pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL)

    def _live(self, text: str) -> LiveStep:
        gs = self._gs
        return LiveStep(text=clean_text(text), score=float(gs["score"] or 0),
                        done=bool(gs["won"] or gs["lost"]), won=bool(gs["won"]),
                        native=self._native())

    def _start(self, game: str, seed: int) -> LiveStep:
        env = self._load(game)
        self._gs = env.reset()
        return self._live(self._gs["feedback"])

    def _restore_native(self, state: HostState) -> bool:
        from textworld.core import GameState
        from textworld.generator.game import GameProgression
        from textworld.logic import Proposition, State

        blob = pickle.loads(state.native)
        env = self._load(state.game)
        tracker = self._tracker()
        tracker.unwrapped._jericho.set_state(blob["z"])
        game = tracker._game
        prog = GameProgression(game, track_quests=False)
        prog.state = State(game.kb.logic, [Proposition.deserialize(f) for f in blob["facts"]])
        prog._valid_actions = list(prog.state.all_applicable_actions(
            game.kb.rules.values(), game.kb.types.constants_mapping))
        tracker._game_progression = prog
        tracker._moves = blob["moves"]
        # Inform7Data carries score/moves over from its previous state when a turn omits them.
        tracker._wrapped_env.state = GameState(score=blob["score"], moves=blob["moves"])
        admissible = sorted(set(tracker._inform7.gen_commands_from_actions(prog.valid_actions)))
        self._gs = GameState(env.state if env.state is not None else {})
        self._gs.update(objective=game.objective, max_score=game.max_score, score=blob["score"],
                        won=blob["won"], lost=blob["lost"], admissible_commands=admissible)
        return True

    # --- extras ---------------------------------------------------------------------
    def walkthrough(self, state: HostState) -> List[str]:
        """The game's winning command sequence from reset (from its generation metadata)."""
        return list(self._load(state.game).state["extra.walkthrough"] or [])

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs, self._env, self._live_key = {}, None, None
