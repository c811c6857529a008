"""WebShop (Yao et al. 2022): needs the WebShop code and product data, which this machine
cannot download. Without them the adapter fails with one message saying what to get.

With them, episodes run through WebShop's text environment and are recovered by
reset + replay. This path is not exercised by the tests (no data here).
"""
from __future__ import annotations

import os
from typing import List, Optional

from asct_jax.envs.external.base import HostEnv, LiveStep

ENV_VAR = "WEBSHOP_DATA"
DEFAULT_PATH = os.path.join("~", ".cache", "webshop")
DATA_FILES = ("items_shuffle.json", "items_ins_v2.json")


def data_error(path: str, missing: List[str]) -> FileNotFoundError:
    return FileNotFoundError(
        f"WebShop data not found under {path!r} (missing {', '.join(missing)}): on a machine "
        f"with network clone https://github.com/princeton-nlp/WebShop, run its setup.sh "
        f"(product data + search index) and copy its data/ folder here, or pass data_path= "
        f"/ set ${ENV_VAR}.")


class WebShopEnv(HostEnv):
    """Host adapter over WebShop's text env; reset(seed) plays instruction session `seed`."""

    name = "webshop"
    info_keys = ("success", "score")

    def __init__(self, data_path: Optional[str] = None, max_turns: int = 15,
                 num_products: Optional[int] = None):
        super().__init__(max_turns)
        path = os.path.expanduser(data_path or os.environ.get(ENV_VAR) or DEFAULT_PATH)
        missing = [f for f in DATA_FILES if not os.path.isfile(os.path.join(path, f))]
        if missing:
            raise data_error(path, missing)
        try:
            from web_agent_site.envs import WebAgentTextEnv
        except ImportError as err:
            raise ImportError(
                "WebShop's `web_agent_site` package is not importable: `pip install -e` the "
                "WebShop repository whose data/ folder is " + repr(path) + ".") from err
        self._env = WebAgentTextEnv(observation_mode="text", num_products=num_products)
        self._obs, self._reward, self._done = "", 0.0, False

    def _game_for(self, seed: int) -> str:
        return f"webshop:{seed}"

    def _task(self) -> str:
        return ""  # the instruction is part of WebShop's observation

    def _live(self) -> LiveStep:
        won = self._done and self._reward >= 1.0
        return LiveStep(text=self._obs, score=self._reward, done=self._done, won=won)

    def _start(self, game: str, seed: int) -> LiveStep:
        self._obs, _ = self._env.reset(session=int(game.split(":")[1]))
        self._reward, self._done = 0.0, False
        return self._live()

    def _advance(self, action: str, replay: bool = False) -> LiveStep:
        self._obs, reward, self._done, _ = self._env.step(action)
        self._reward = float(reward or 0.0)
        return self._live()

    def _legal(self) -> List[str]:
        avail = self._env.get_available_actions()
        search = ["search[<query>]"] if avail.get("has_search_bar") else []
        return search + [f"click[{c}]" for c in avail.get("clickables", [])]
