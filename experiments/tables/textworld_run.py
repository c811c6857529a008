"""GRPO and FACTOR trained on real TextWorld cooking games (host-side rollouts).

    python -m experiments.tables.textworld_run --config experiments/configs/textworld.py:quick

Each (method, seed) run lives in results/<experiment>/<method>_s<seed>/ (see
asct_jax.rl.host_games); a finished run of the same config is not run again
(experiments.harness.runner.run_grid). Writes
results/<experiment>/table.{md,json}: held-out success and score, initial vs final,
mean ± std over seeds.
"""
import os
from typing import Dict, List

from asct_jax.infra import config_cli
from experiments.harness.make_textworld_games import make_games
from experiments.harness.runner import run_grid, train_run, write_table

METRICS = {
    "initial/env/success": "success (initial)", "final/env/success": "success (final)",
    "initial/env/score": "score (initial)", "final/env/score": "score (final)",
    "initial/env/norm_score": "score/max (initial)", "final/env/norm_score": "score/max (final)",
    "total/env_calls": "env calls", "wall_clock_s": "wall clock (s)",
}


def build_games(tw) -> Dict[str, List[str]]:
    """{"train": [...], "eval": [...]} game files, generated when missing.

    Training games have generation seeds start_seed .. start_seed + num_train - 1, held-out
    ones the next num_eval seeds (unseen games, same recipe/take/go settings).
    """
    out = os.path.expanduser(tw.games_dir or os.environ.get(
        "ASCT_JAX_TEXTWORLD_GAMES", os.path.join("~", ".cache", "asct_jax", "textworld")))
    kw = dict(out=out, recipe=tw.recipe, take=tw.take, go=tw.go)
    return {"train": make_games(tw.num_train, start_seed=tw.start_seed, **kw),
            "eval": make_games(tw.num_eval, start_seed=tw.start_seed + tw.num_train, **kw)}


def game_set(config):
    """The GameSet of config.textworld: training games and unseen held-out games."""
    import functools

    from asct_jax.envs.external import TextWorldEnv
    from asct_jax.infra.typed_config import from_section
    from asct_jax.rl.host_games import GameSet, HostGameConfig

    tw = config.textworld
    files = build_games(tw)
    return GameSet(name="textworld", settings=from_section(HostGameConfig, config, "textworld"),
                   make_train=functools.partial(TextWorldEnv, files["train"], tw.max_turns),
                   make_eval=functools.partial(TextWorldEnv, files["eval"], tw.max_turns),
                   num_train=len(files["train"]), num_eval=len(files["eval"]))


def train_on_games(config, return_params: bool = False):
    """One run on the TextWorld games of config.textworld (host-side rollouts)."""
    from asct_jax.rl.host_games import HostGames

    source = HostGames(config, game_set(config))
    return train_run(config, return_params=return_params, source=source)   # closes it


def run_all(config):
    variants = [(m, {"method": m}) for m in config.table.methods]
    return run_grid(config, variants, tuple(config.table.seeds), config.train.experiment,
                    train=train_on_games)


def main(config):
    results = run_all(config)
    tw = config.textworld
    out_dir = os.path.join(config.train.results_dir, config.train.experiment)
    table = write_table(results, METRICS, os.path.join(out_dir, "table"))
    print(f"\n## TextWorld tw-cooking (recipe {tw.recipe}, take {tw.take}, go {tw.go}): "
          f"{tw.num_train} train / {tw.num_eval} held-out games, G = "
          f"{config.rollout.group_size}, {config.rollout.num_groups} games x G episodes a "
          f"step, {config.train.steps} steps, seeds {list(config.table.seeds)}; held-out: "
          f"{tw.eval_episodes} sampled episodes per game, max {tw.max_turns} turns\n")
    print(table)


if __name__ == "__main__":
    config_cli.run_main(main)
