"""Generate TextWorld cooking games (tw-cooking, as `tw-make tw-cooking` does) offline.

    python -m experiments.harness.make_textworld_games --config.n=8 --config.out=DIR \
        [--config.recipe=1 --config.take=1 --config.go=1]

Idempotent: games already in the directory are kept. Files are named by their settings
and seed (cooking_r1_t1_g1_s3.z8 + .json + .ni) and moved into place atomically, so
parallel callers do not clash. Takes about 1 s a game on one CPU core.
"""
from __future__ import annotations

import os
import tempfile
from typing import List

from asct_jax.infra import config_cli

CONFIG = "experiments/configs/harness/make_textworld_games.py"

DEFAULT_OUT = os.path.join("~", ".cache", "asct_jax", "textworld")


def game_path(out: str, seed: int, recipe: int = 1, take: int = 1, go: int = 1) -> str:
    return os.path.join(os.path.expanduser(out), f"cooking_r{recipe}_t{take}_g{go}_s{seed}.z8")


def make_game(path: str, seed: int, recipe: int = 1, take: int = 1, go: int = 1) -> str:
    """Generate one tw-cooking game at `path` (.z8) unless it is already there."""
    stem = os.path.splitext(path)[0]
    if os.path.isfile(path) and os.path.isfile(stem + ".json"):
        return path
    import textworld
    import textworld.challenges
    from textworld.generator import compile_game

    if go not in (1, 6, 9, 12) or not 0 <= take <= recipe:
        raise ValueError(f"tw-cooking needs go in (1, 6, 9, 12) and 0 <= take <= recipe; "
                         f"got go={go}, take={take}, recipe={recipe}.")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path) or ".") as tmp:
        options = textworld.GameOptions()
        options.seeds = seed
        options.path = os.path.join(tmp, os.path.basename(path))
        options.file_ext = ".z8"
        options.force_recompile = True
        settings = dict(recipe=recipe, take=take, go=go, open=False, cook=False, cut=False,
                        drop=False, recipe_seed=0, split=None)
        _, make, _ = textworld.challenges.CHALLENGES["tw-cooking"]
        game = make(settings=settings, options=options)
        compiled = compile_game(game, options)
        tmp_stem = os.path.splitext(compiled)[0]
        for ext in (".ni", ".json", ".z8"):  # .z8 last: its presence means complete
            if os.path.isfile(tmp_stem + ext):
                os.replace(tmp_stem + ext, stem + ext)
    return path


def make_games(n: int, out: str = DEFAULT_OUT, start_seed: int = 0, recipe: int = 1,
               take: int = 1, go: int = 1) -> List[str]:
    """Paths of n games with seeds start_seed.. start_seed+n-1, generating missing ones."""
    return [make_game(game_path(out, s, recipe, take, go), s, recipe, take, go)
            for s in range(start_seed, start_seed + n)]


def main(args) -> None:
    """Makes the games of `args` (experiments/configs/harness/make_textworld_games.py)."""
    for path in make_games(args.n, args.out, args.start_seed, args.recipe, args.take, args.go):
        print(path)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
