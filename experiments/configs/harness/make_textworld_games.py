"""The options of experiments/harness/make_textworld_games.py.

    python -m experiments.harness.make_textworld_games --config.n=8 --config.out=DIR

n: number of games; out: output directory; start_seed: the first game's seed; recipe:
ingredients in the recipe; take: ingredients to find (<= recipe); go: locations.
"""
from experiments.configs.options import tool_options

GO = (1, 6, 9, 12)


def get_config(arg: str = ""):
    from experiments.harness.make_textworld_games import DEFAULT_OUT
    return tool_options("make_textworld_games", arg, n=8, out=DEFAULT_OUT, start_seed=0, recipe=1,
                        take=1, go=1)


def get_constraints():
    return {"go": GO}
