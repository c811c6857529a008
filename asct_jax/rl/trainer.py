"""The training driver: builds everything from a config, runs the compiled step, logs,
evaluates, checkpoints and resumes.

    summary = train(config)

The Python loop only moves host metrics to the logger and saves checkpoints; all the work
of a step (rollout, credit, update) is one compiled call. The step's key is
fold_in(key(seed), step), so a resumed run replays exactly the same keys as an
uninterrupted one.
"""
from __future__ import annotations

import os
import time
from typing import Dict

from absl import logging as absl_logging
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from asct_jax.envs import make as make_env
from asct_jax.models import Decoder, get_preset
from asct_jax.infra.checkpoint import Checkpointer, check_finite, start_or_resume
from asct_jax.rl.credit import CreditContext, make_credit
from asct_jax.rl.policy import Policy
from asct_jax.infra.run_logger import RunLogger
from asct_jax.rl.train_step import TrainState, make_eval, make_mesh, make_optimizer, \
    make_train_step, to_host

MODEL_FIELDS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                "intermediate_size")


def build_env(config):
    options = dict(config.env.get("options", {}))
    return make_env(config.env.name, size=config.env.size, **options)


def build_policy(config, env):
    """The decoder (preset + overrides, vocabulary = the environment tokenizer) and Policy."""
    overrides = {f: config.model[f] for f in MODEL_FIELDS if config.model.get(f)}
    seq = env.obs_len + env.feedback_len + env.action_len + 2
    mcfg = get_preset(config.model.preset, vocab_size=len(env.tokenizer),
                      max_seq_len=max(seq, 16), **overrides)
    model = Decoder(mcfg, rngs=nnx.Rngs(config.seed))
    graphdef, params = nnx.split(model)
    policy = Policy(graphdef, mcfg.vocab_size, env.obs_len, env.action_len, env.feedback_len)
    return policy, params


class Experiment:
    """Everything a run needs, built once from the config (compiles happen lazily)."""

    def __init__(self, config):
        self.config = config
        self.env, self.env_params = build_env(config)
        self.policy, params = build_policy(config, self.env)
        self.mesh = make_mesh(config.train.num_devices or None)
        self.replicated = NamedSharding(self.mesh, P())
        ctx = CreditContext(policy=self.policy, env=self.env, env_params=self.env_params,
                            group_size=config.rollout.group_size)
        self.credit_fn = make_credit(config.method, config, ctx)
        self.optimizer = make_optimizer(config.ppo)
        # Placed replicated up front, like the step's outputs: the step compiles once.
        self.init_state = jax.device_put(
            TrainState(params=params, opt_state=self.optimizer.init(params),
                       step=jnp.zeros((), jnp.int32)), self.replicated)
        ref = params if config.ppo.kl_coef > 0 else None
        self.step_fn = make_train_step(config, self.policy, self.env, self.env_params,
                                       self.credit_fn, self.optimizer, self.mesh, ref)
        self.eval_fn = make_eval(self.policy, self.env, self.env_params,
                                 config.train.eval_episodes, self.mesh,
                                 greedy=config.train.eval_greedy)
        self.key = jax.device_put(jax.random.key(config.seed), self.replicated)
        # The held-out tasks do not depend on the training seed: every method and seed is
        # evaluated on the same episodes.
        self.eval_key = jax.device_put(jax.random.key(config.train.eval_seed), self.replicated)

    def evaluate(self, params) -> Dict[str, float]:
        return {f"eval/{k}": v for k, v in to_host(self.eval_fn(params, self.eval_key)).items()}


    def step(self, state, step: int):
        """One compiled training step; returns (state, host metrics)."""
        state, metrics = self.step_fn(state, self.key)
        return state, to_host(metrics)

    def summary_extra(self) -> Dict[str, object]:
        return {"env": self.config.env.name}

    def close(self):
        pass


PLOT_KEYS = ("rollout/return", "eval/env/score", "eval/env/success", "train/loss",
             "credit/aux_tokens", "train/approx_kl")


def run_training(config, exp, return_params: bool = False):
    """The loop shared by every experiment object (JAX environments, host games).

    `exp` provides init_state, step(state, step_index) -> (state, host metrics),
    evaluate(params) -> {"eval/...": float}, summary_extra() and close(). Checkpoints,
    resume, the non-finite guard, logging and the summary are handled here.
    """
    tc = config.train
    run_dir = os.path.join(tc.results_dir, tc.experiment, tc.run)
    ckpt = Checkpointer(os.path.join(run_dir, "checkpoints"), save_every=tc.checkpoint_every,
                        keep=tc.keep)
    state, start = start_or_resume(ckpt, exp.init_state, tc.resume)
    logger = RunLogger(tc.results_dir, tc.experiment, tc.run, config, total_steps=tc.steps,
                       resume_step=start if tc.resume else None, progress=tc.progress,
                       progress_keys=("rollout/return", "eval/env/score"))
    t0 = time.time()
    if start == 0:
        logger.log(0, exp.evaluate(state.params))
    for step in range(start, tc.steps):
        state, m = exp.step(state, step)
        check_finite(step + 1, {k: v for k, v in m.items() if k.startswith("train/")},
                     ckpt.latest_step())
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            m.update(exp.evaluate(state.params))
        logger.log(step + 1, m)
        ckpt.save(step + 1, state, extra={"step": step + 1})
    total = lambda key: sum(r.get(key) or 0.0 for r in logger.records)  # noqa: E731
    first, last = logger.records[0], logger.records[-1]
    summary = {
        "method": config.method, "seed": config.seed, "steps": tc.steps,
        **exp.summary_extra(),
        **{k.replace("eval/", "initial/"): v for k, v in first.items() if k.startswith("eval/")},
        **{k.replace("eval/", "final/"): v for k, v in last.items() if k.startswith("eval/")},
        "total/aux_tokens": total("credit/aux_tokens"),
        "total/env_calls": total("rollout/env_calls") + total("credit/env_calls"),
        "total/rollout_env_calls": total("rollout/env_calls"),
        "wall_clock_s": time.time() - t0,
    }
    logger.write_summary(summary)
    logger.plot([k for k in PLOT_KEYS if any(k in r for r in logger.records)])
    logger.close()
    ckpt.close()
    exp.close()
    return (summary, state.params) if return_params else summary


def train(config, return_params: bool = False):
    """Runs config.train.steps steps on a JAX-native environment (resuming if asked);
    returns the summary dict (and the final parameters if `return_params`)."""
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    return run_training(config, Experiment(config), return_params)
