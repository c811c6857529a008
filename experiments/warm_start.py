"""Writes the warm start every method can train from: SFT on the epsilon-noisy scripted
expert, then the value head (asct_jax/rl/warm_start.py).

    python -m experiments.warm_start --config experiments/configs/base.py \
        --config.env.name=household
    python -m experiments.train --config experiments/configs/base.py \
        --config.env.name=household --config.train.init_from=results/train/warm_start

Writes results/<experiment>/warm_start/: checkpoint/ (orbax, the params only) and
summary.json: the held-out success / score of the warm-started actor (the trainer's
evaluation: train.eval_episodes episodes of the key train.eval_seed, exactly the step-0
evaluation of a run with train.init_from) beside the expert's and the uniform-random
policy's on the same tasks. Exit status 1 if the directory already holds a warm start.
"""
from __future__ import annotations

import os
import sys
import time

import jax

from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_json

KEYS = ("env/success", "env/score", "return", "episode_len")


def scripted_metrics(source, num_episodes: int, eval_seed: int, epsilon: float):
    """Held-out metrics of the epsilon-noisy expert (1.0: uniform random) on the tasks of
    the trainer's evaluation (key(eval_seed), num_episodes episodes)."""
    from asct_jax.rl.rollout import episode_metrics
    from asct_jax.rl.warm_start import expert_episodes

    def play(key):
        data = expert_episodes(source.env, source.env_params, key, num_episodes, epsilon,
                               source.prompt.pad_id).rollout
        return episode_metrics(data)
    return {k: float(v) for k, v in jax.jit(play)(jax.random.key(eval_seed)).items()}


def run(config):
    """Warm start, save, evaluate; returns the summary dict."""
    from asct_jax.rl.train_step import policy_params
    from asct_jax.rl.trainer import JaxEnvSource, build_learner
    from asct_jax.rl.warm_start import save_params, warm_start
    from experiments import registry

    tc = config.train
    out_dir = os.path.join(tc.results_dir, tc.experiment, "warm_start")
    if os.path.exists(os.path.join(out_dir, "checkpoint")):
        raise FileExistsError(f"{out_dir} already holds a warm start; delete it or choose "
                              "another --config.train.experiment")
    source = JaxEnvSource(config)
    t0 = time.time()
    params, info = warm_start(config, source)
    save_params(out_dir, params, extra={"env": config.env.name, "seed": config.seed})
    wall = time.time() - t0
    # The trainer's own step-0 evaluation of a run started from the saved params.
    c = config.copy_and_resolve_references()
    c.train.init_from = out_dir
    learner = build_learner(c, registry.get(c.method), source)
    actor = source.make_eval(learner)(policy_params(learner.init_state))
    summary = {
        "env": config.env.name, "seed": config.seed, "eval_episodes": tc.eval_episodes,
        "eval_seed": tc.eval_seed, "eval_greedy": tc.eval_greedy,
        "warm_start": dict(config.warm_start), "warm_start_s": wall, **info,
        "actor": {k: actor[f"eval/{k}"] for k in KEYS},
        "expert": {k: v for k, v in scripted_metrics(
            source, tc.eval_episodes, tc.eval_seed, 0.0).items() if k in KEYS},
        "random": {k: v for k, v in scripted_metrics(
            source, tc.eval_episodes, tc.eval_seed, 1.0).items() if k in KEYS},
    }
    atomic_write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary


def main(config):
    try:
        s = run(config)
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    for who in ("actor", "expert", "random"):
        print(f"{who:7s} success {s[who]['env/success']:.3f}  score {s[who]['env/score']:.3f}")
    print(f"warm start {s['warm_start_s']:.0f} s; sft loss {s['sft_loss_first']:.3f} -> "
          f"{s['sft_loss_last']:.3f}; value loss {s['value_loss_first']:.3f} -> "
          f"{s['value_loss_last']:.3f}")


if __name__ == "__main__":
    config_cli.run_main(main)
