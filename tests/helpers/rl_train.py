"""The small training config of the train-step tests and its builders: small_config,
build (learner and compiled step), the experiments.train command line (_cli_args) and its
subprocess environment (_env), and a metrics.jsonl reader (_metrics)."""
import json
import os
import sys

from experiments.configs import base as base_config
from tests.helpers import REPO_ROOT

ROOT = REPO_ROOT


def small_config(tmp_path, **train):
    c = base_config.use_test_model(base_config.get_config())
    c.env.name = "household"
    c.rollout.num_groups = 4
    c.rollout.group_size = 4
    c.ppo.epochs = 1
    c.ppo.minibatches = 2
    c.train.steps = 2
    c.train.eval_every = 2
    c.train.eval_episodes = 8
    c.train.checkpoint_every = 1
    c.train.results_dir = str(tmp_path)
    c.train.progress = False
    for k, v in train.items():
        c.train[k] = v
    return c


def build(c):
    """(learner, compiled step(state, step) -> (state, host metrics)) of a config."""
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments.harness import registry

    source = JaxEnvSource(c)
    learner = build_learner(c, registry.get(c.method), source)
    return learner, source.make_step(learner)


def _cli_args(tmp_path, run, steps, extra=()):
    return [sys.executable, "-m", "experiments.train",
            "--config", os.path.join(ROOT, "experiments/configs/base.py"),
            "--config.model.hidden_size=32", "--config.model.num_layers=1",
            "--config.model.num_heads=2", "--config.model.num_kv_heads=1",
            "--config.model.intermediate_size=64", "--config.rollout.num_groups=4",
            "--config.rollout.group_size=4", "--config.ppo.epochs=1",
            f"--config.train.steps={steps}", "--config.train.eval_every=2",
            "--config.train.eval_episodes=8", "--config.train.checkpoint_every=1",
            f"--config.train.results_dir={tmp_path}", f"--config.train.run={run}",
            "--config.train.progress=False", *extra]


def _env(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _metrics(path):
    drop = ("wall", "time")
    with open(path) as f:
        return [{k: v for k, v in json.loads(line).items() if not any(d in k for d in drop)}
                for line in f]
