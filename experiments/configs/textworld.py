"""FACTOR and GRPO on real TextWorld cooking games (host-side rollouts).

    python -m experiments.tables.textworld_run --config experiments/configs/textworld.py        # full
    python -m experiments.tables.textworld_run --config experiments/configs/textworld.py:quick  # reduced

The games are tw-cooking (experiments/harness/make_textworld_games.py, generated into
textworld.games_dir when missing): textworld.num_train training games and the next
textworld.num_eval generation seeds as unseen held-out games.

FACTOR's TAC continuations (two checkpoints per episode, M = 4 continuations of pi_old
each) run as on the JAX environments, but on the host, between the rollout and the
jitted learn step: the games restore each stored turn from its Jericho save blob (or by
reset + replay) and play on (factor_jax.host_continuations). The games' outcome is the
return (factor.outcome "return", rule "raw").
"""
import ml_collections

from experiments.configs import base

METHODS = ("grpo", "factor")


def get_config(arg: str = "full"):
    c = base.get_config()
    c.method = "factor"
    c.env.name = "textworld"

    c.textworld = ml_collections.ConfigDict()
    c.textworld.games_dir = ""          # "": $ASCT_JAX_TEXTWORLD_GAMES or ~/.cache/asct_jax/textworld
    c.textworld.recipe = 1
    c.textworld.take = 1
    c.textworld.go = 1                  # rooms: 1, 6, 9 or 12
    c.textworld.start_seed = 100        # generation seeds of the training games
    c.textworld.num_train = 8
    c.textworld.num_eval = 4
    c.textworld.max_turns = 10
    c.textworld.obs_len = 128           # observation tokens kept (the last ones)
    c.textworld.feedback_len = 32
    c.textworld.action_len = 10
    c.textworld.max_candidates = 32
    c.textworld.eval_episodes = 8       # sampled episodes per held-out game
    c.textworld.tokenizer_episodes = 2  # random episodes per game for the vocabulary
    c.textworld.max_vocab = 2048

    c.rollout.num_groups = 4            # training games per step
    c.rollout.group_size = 4            # G episodes per game

    c.train.experiment = "textworld"
    c.train.steps = 40
    c.train.eval_every = 10
    c.train.checkpoint_every = 10
    c.train.progress = False

    c.table = ml_collections.ConfigDict()
    c.table.methods = METHODS
    c.table.seeds = (42, 43, 1337)
    if arg == "quick":
        c.train.steps = 20
        c.train.eval_every = 10
        c.train.checkpoint_every = 10
        c.table.seeds = (42, 43)
    elif arg != "full":
        raise ValueError(f"textworld config arg must be 'full' or 'quick', got {arg!r}")
    return c


def get_constraints():
    return dict(base.host_game_constraints("textworld", "textworld"),
                **{"textworld.go": (1, 6, 9, 12)})
