"""GRPO, SERL and FACTOR trained on real ScienceWorld tasks, evaluated on their dev
variations, from the gold-path warm start (experiments/configs/scienceworld.py).

    python -m experiments.tables.scienceworld_run --config experiments/configs/scienceworld.py:smoke
    python -m experiments.tables.scienceworld_run --config experiments/configs/scienceworld.py:quick

Parts, each written under results/<experiment>/ and reused when present, so a table
longer than a session continues where it stopped (the runs themselves resume from their
checkpoints, experiments.harness.runner.run_grid):
  1. gold_paths.json: the train games' gold paths in admissible spelling
     (asct_jax.envs.external.scienceworld_gold);
  2. warm_start/: SFT on the winning paths, then the value head
     (asct_jax.rl.host_warm_start), with the warm actor's held-out success;
  3. <method>_s<seed>/: the runs (asct_jax.rl.host_games.HostGames);
  4. table.{md,json}, comparisons.{md,json} (config.table.comparisons paired over seeds,
     experiments.harness.runner.write_comparisons) and timing.json (seconds of each part).
"""
from __future__ import annotations

import functools
import json
import os
import time

from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_json
from experiments.harness.runner import (liveness_table, run_grid, train_run,
                                        write_comparisons, write_table)
from experiments.tables.factor_table import PAPER_SUCCESS   # the paper's "science" row

METRICS = {
    "initial/env/success": "success (initial)", "final/env/success": "success (final)",
    "initial/env/score": "score (initial)", "final/env/score": "score (final)",
    "total/env_calls": "env calls", "wall_clock_s": "wall clock (s)",
}
# A generating actor's (actor.chooser = "generate"): the share of invalid steps held out.
GEN_METRICS = {"initial/gen/invalid": "invalid (initial)", "final/gen/invalid": "invalid (final)"}
LIVENESS = {"credit/coef_abs_mean": "mean |C|", "train/grad_norm": "grad norm",
            "credit/env_calls": "credit env calls / step", "rollout/env/success":
            "success (rollout)", "time/rollout_s": "rollout s", "time/prepare_s":
            "continuations s", "time/learn_s": "learn s", "rollout/gen/invalid":
            "invalid (rollout)"}


def game_set(config):
    """The GameSet of config.scienceworld: train variations to train on, dev to evaluate."""
    from asct_jax.envs.external.command_rules import VerbQuotaRule
    from asct_jax.envs.external.scienceworld_env import ScienceWorldEnv
    from asct_jax.infra.typed_config import from_section
    from asct_jax.rl.host_games import GameSet, HostGameConfig

    sw = config.scienceworld
    make = functools.partial(ScienceWorldEnv, tuple(sw.tasks), simplification=sw.simplification,
                             max_turns=sw.max_turns, reward=sw.reward)
    return GameSet(name="scienceworld",
                   settings=from_section(HostGameConfig, config, "scienceworld"),
                   make_train=functools.partial(make, split="train",
                                                num_variations=sw.num_train),
                   make_eval=functools.partial(make, split="dev", num_variations=sw.num_eval),
                   num_train=len(sw.tasks) * sw.num_train,
                   num_eval=len(sw.tasks) * sw.num_eval,
                   select=VerbQuotaRule(sw.max_candidates, sw.rule_seed))


def check_games(games) -> None:
    """Every task has the variations asked for (one Java start)."""
    for make, n, split in ((games.make_train, games.num_train, "train"),
                           (games.make_eval, games.num_eval, "dev")):
        env = make()
        try:
            if len(env.games) != n:
                raise ValueError(f"scienceworld.num_{'train' if split == 'train' else 'eval'}"
                                 f": a task has fewer {split} variations than asked "
                                 f"({len(env.games)} games for {n}); lower it")
        finally:
            env.close()


def gold_paths(config, games, out_dir: str):
    """The train games' gold paths in admissible spelling (made once, then read)."""
    from asct_jax.envs.external.scienceworld_gold import admissible_gold_path

    path = os.path.join(out_dir, "gold_paths.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    env = games.make_train()
    try:
        out = [dict(vars(admissible_gold_path(env, s))) for s in range(games.num_train)]
    finally:
        env.close()
    atomic_write_json(path, out)
    return out


def warm_start(config, games, paths, out_dir: str) -> str:
    """results/<experiment>/warm_start/: the gold-path warm start (made once)."""
    import dataclasses

    from asct_jax.rl.build import build_learner
    from asct_jax.rl.host_games import HostGames
    from asct_jax.rl.host_warm_start import host_warm_start, paths_of
    from asct_jax.rl.params_io import save_params
    from asct_jax.rl.train_step import policy_params
    from experiments.harness import registry

    ws_dir = os.path.join(out_dir, "warm_start")
    if os.path.exists(os.path.join(ws_dir, "summary.json")):
        return ws_dir
    if os.path.exists(ws_dir):   # interrupted between the checkpoint and the summary
        import shutil
        shutil.rmtree(ws_dir)
    method, rc = registry.check(config)   # the edge: every section typed and checked
    source = HostGames(rc, games)
    try:
        t0 = time.time()
        params, info = host_warm_start(rc, source, paths_of(paths))
        save_params(ws_dir, params, extra={"env": "scienceworld",
                                           "seed": rc.warm_start.seed})
        atomic_write_json(os.path.join(ws_dir, "config.json"), rc.record)
        wall = time.time() - t0
        warm = rc.replace(train=dataclasses.replace(rc.train, init_from=ws_dir))
        learner = build_learner(warm, method, source)
        actor = source.make_eval(learner)(policy_params(learner.init_state))
    finally:
        source.close()
    atomic_write_json(os.path.join(ws_dir, "summary.json"),
                      {"warm_start_s": wall, **info, "gold_paths": len(paths_of(paths)),
                       "actor": actor})
    print(f"warm start: held-out success {actor['eval/env/success']:.3f}, score "
          f"{actor['eval/env/score']:.1f}; sft loss {info['sft_loss_first']:.3f} -> "
          f"{info['sft_loss_last']:.3f}; {wall:.0f} s", flush=True)
    return ws_dir


def train_on_games(config, return_params: bool = False):
    """One run on the ScienceWorld games of config.scienceworld."""
    from asct_jax.rl.host_games import HostGames

    source = HostGames(config, game_set(config))
    return train_run(config, return_params=return_params, source=source)   # closes it


def main(config):
    tc, sw = config.train, config.scienceworld
    out_dir = os.path.join(tc.results_dir, tc.experiment)
    os.makedirs(out_dir, exist_ok=True)
    timing_path = os.path.join(out_dir, "timing.json")
    timing = {}
    if os.path.exists(timing_path):
        with open(timing_path) as f:
            timing = json.load(f)
    games = game_set(config)
    t0 = time.time()
    check_games(games)
    paths = gold_paths(config, games, out_dir)
    timing.setdefault("gold_paths_s", time.time() - t0)
    won = sum(p["won"] for p in paths)
    print(f"gold paths: {won} / {len(paths)} win after mapping", flush=True)
    t0 = time.time()
    config.train.init_from = warm_start(config, games, paths, out_dir)
    timing.setdefault("warm_start_s", time.time() - t0)
    atomic_write_json(timing_path, timing)
    variants = [(m, {"method": m}) for m in config.table.methods]
    results = run_grid(config, variants, tuple(config.table.seeds), tc.experiment,
                       train=train_on_games)
    timing["runs_s"] = {f"{m}_s{s}": r.get("wall_clock_s") for m, rs in results.items()
                        for s, r in zip(config.table.seeds, rs)}
    atomic_write_json(timing_path, timing)
    generate = config.actor.get("chooser", "candidates") == "generate"
    table = write_table(results, {**METRICS, **(GEN_METRICS if generate else {})},
                        os.path.join(out_dir, "table"))
    live = liveness_table(out_dir, list(config.table.methods), config.table.seeds, LIVENESS)
    print(f"\n## ScienceWorld ({', '.join(sw.tasks)}; simplification {sw.simplification!r}):"
          f" {sw.num_train} train / {sw.num_eval} dev variations per task, "
          f"{config.rollout.num_groups} games x G = {config.rollout.group_size} a step, "
          f"{tc.steps} steps, max {sw.max_turns} turns, K = {sw.max_candidates} candidates, "
          f"seeds {list(config.table.seeds)}; held-out: {sw.eval_episodes} sampled episodes "
          f"per dev variation\n")
    print(table)
    print("\n" + live)
    print("\n" + write_comparisons(results, config.table.comparisons,
                                   "final/env/success", PAPER_SUCCESS["science"],
                                   os.path.join(out_dir, "comparisons")))


if __name__ == "__main__":
    config_cli.run_main(main)
