"""The options of experiments/harness/make_textworld_games.py.

    python -m experiments.harness.make_textworld_games --config.n=8 --config.out=DIR

n: number of games; out: output directory; start_seed: the first game's seed; recipe:
ingredients in the recipe; take: ingredients to find (<= recipe); go: locations.
"""
import ml_collections

GO = (1, 6, 9, 12)


def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"make_textworld_games config takes no arg, got {arg!r}")
    from experiments.harness.make_textworld_games import DEFAULT_OUT
    c = ml_collections.ConfigDict()
    c.n = 8
    c.out = DEFAULT_OUT
    c.start_seed = 0
    c.recipe = 1
    c.take = 1
    c.go = 1
    return c


def get_constraints():
    return {"go": GO}
