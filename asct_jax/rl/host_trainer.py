"""Training on real text games driven on the host (TextWorld tw-cooking).

    summary = train_host(config)          # config: experiments/configs/textworld.py

The loop of asct_jax.rl.trainer.train, with the rollout on the host: each step plays
B = rollout.num_groups * G episodes with `host_rollout` (num_groups training games drawn
without replacement, G episodes each) and hands the batch to the jitted
`make_learn_step` (credit + PPO update). Held-out evaluation plays textworld.eval_episodes
episodes of every held-out game (game seeds the policy never trains on) with a fixed key,
so every method and seed is evaluated on the same episodes.

Credit methods must not need environment restores inside the jitted step: GRPO, PPO,
SERL and FACTOR. FACTOR's value calibration restores the games on the host between the
rollout and the learn step (asct_jax.rl.host_calibration) and hands the targets in with
the batch; factor.calib_turns = 0 turns it off (TAC on the value head alone).

Outputs (results/<experiment>/<run>/): config.json, metrics.jsonl, summary.json, plots/
and checkpoints/ (as trainer.train); the tokenizer lives in
results/<experiment>/tokenizer (shared by the runs of an experiment). The step's keys are
fold_in(key(seed), step) and its training games come from a NumPy generator seeded by
(seed, step), so a resumed run replays the same steps.
"""
from __future__ import annotations

from absl import logging as absl_logging
import os
import time
from typing import Dict, List

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from asct_jax.envs.external import BatchedHostEnv, TextWorldEnv
from asct_jax.models import Decoder, get_preset
from asct_jax.rl.credit import CreditContext, make_credit
from asct_jax.rl.host_calibration import host_calibrate
from asct_jax.rl.host_rollout import (CommandEncoder, game_texts, host_rollout,
                                      host_rollout_from, load_or_build_tokenizer)
from asct_jax.rl.policy import Policy
from asct_jax.rl.rollout import episode_metrics
from asct_jax.rl.train_step import TrainState, make_learn_step, make_mesh, make_optimizer, \
    to_host
from asct_jax.rl.trainer import MODEL_FIELDS, run_training

# Methods whose credit needs to restore environment states inside the jitted step.
NEEDS_ENV = ("vineppo", "asct_uniform", "asct_uct", "asct_agentuct", "asct_factor")


def build_games(tw) -> Dict[str, List[str]]:
    """{"train": [...], "eval": [...]} game files, generated when missing.

    Training games have generation seeds start_seed .. start_seed + num_train - 1, held-out
    ones the next num_eval seeds (unseen games, same recipe/take/go settings).
    """
    from experiments.make_textworld_games import make_games

    out = os.path.expanduser(tw.games_dir or os.environ.get(
        "ASCT_JAX_TEXTWORLD_GAMES", os.path.join("~", ".cache", "asct_jax", "textworld")))
    kw = dict(out=out, recipe=tw.recipe, take=tw.take, go=tw.go)
    return {"train": make_games(tw.num_train, start_seed=tw.start_seed, **kw),
            "eval": make_games(tw.num_eval, start_seed=tw.start_seed + tw.num_train, **kw)}


def build_tokenizer_for(config, games: Dict[str, List[str]]):
    """The word-level tokenizer of the games (built once per experiment, then loaded).

    Its vocabulary covers the texts of every game used (walkthrough + random episodes):
    words only, no rewards, like the fixed vocabulary of a pretrained model.
    """
    tw = config.textworld
    directory = os.path.join(config.train.results_dir, config.train.experiment, "tokenizer")
    files = games["train"] + games["eval"]

    def texts():
        env = TextWorldEnv(files, max_turns=tw.max_turns)
        try:
            return game_texts(env, range(len(files)), random_episodes=tw.tokenizer_episodes,
                              max_steps=tw.max_turns)
        finally:
            env.close()
    return load_or_build_tokenizer(directory, texts, max_vocab=tw.max_vocab)


def build_host_policy(config, vocab_size: int):
    tw = config.textworld
    overrides = {f: config.model[f] for f in MODEL_FIELDS if config.model.get(f)}
    seq = tw.obs_len + tw.feedback_len + tw.action_len + 2
    mcfg = get_preset(config.model.preset, vocab_size=vocab_size, max_seq_len=max(seq, 16),
                      **overrides)
    graphdef, params = nnx.split(Decoder(mcfg, rngs=nnx.Rngs(config.seed)))
    return Policy(graphdef, mcfg.vocab_size, tw.obs_len, tw.action_len, tw.feedback_len), params


def host_metrics(batch) -> Dict[str, float]:
    """episode_metrics plus the score as a fraction of the game's maximum."""
    m = to_host(episode_metrics(batch))
    info = batch.final_info
    if "max_score" in info:
        m["env/norm_score"] = float(np.mean(np.asarray(info["score"])
                                            / np.maximum(np.asarray(info["max_score"]), 1e-9)))
    return m


class HostExperiment:
    """Games, tokenizer, policy, credit, learn step and the host environments of a run."""

    def __init__(self, config):
        if config.method in NEEDS_ENV:
            raise ValueError(f"method {config.method!r} restores environment states inside "
                             "the jitted step; host games support grpo, ppo_*, serl, factor*")
        self.config = config
        self.calibrates = (config.method.startswith("factor")
                           and config.factor.calib_turns > 0
                           and config.factor.calib_rollouts > 0)
        tw, rc = config.textworld, config.rollout
        self.games = build_games(tw)
        if rc.num_groups > len(self.games["train"]):
            raise ValueError(f"rollout.num_groups = {rc.num_groups} > textworld.num_train = "
                             f"{len(self.games['train'])} (groups use distinct games)")
        self.tokenizer = build_tokenizer_for(config, self.games)
        self.policy, params = build_host_policy(config, len(self.tokenizer))
        self.mesh = make_mesh(config.train.num_devices or None)
        ctx = CreditContext(policy=self.policy, env=None, env_params=None,
                            group_size=rc.group_size)
        self.credit_fn = make_credit(config.method, config, ctx)
        self.optimizer = make_optimizer(config.ppo)
        # Placed replicated up front, like the learn step's outputs: it compiles once.
        self.init_state = jax.device_put(
            TrainState(params=params, opt_state=self.optimizer.init(params),
                       step=jnp.zeros((), jnp.int32)), NamedSharding(self.mesh, P()))
        ref = params if config.ppo.kl_coef > 0 else None
        self.learn = make_learn_step(config, self.policy, self.credit_fn, self.optimizer,
                                     self.mesh, ref)
        batch = rc.num_groups * rc.group_size
        self.train_env = BatchedHostEnv([TextWorldEnv(self.games["train"], tw.max_turns)
                                         for _ in range(batch)])
        n_eval = len(self.games["eval"]) * tw.eval_episodes
        self.eval_env = BatchedHostEnv([TextWorldEnv(self.games["eval"], tw.max_turns)
                                        for _ in range(n_eval)])
        self.encoder = CommandEncoder(self.tokenizer, tw.action_len)
        self.key = jax.random.key(config.seed)
        self.eval_key = jax.random.key(config.train.eval_seed)

    def _rollout(self, params, env, seeds, group_size, key, greedy=False):
        tw = self.config.textworld
        return host_rollout(self.policy, params, env, self.tokenizer, seeds,
                            group_size=group_size, max_turns=tw.max_turns,
                            obs_len=tw.obs_len, feedback_len=tw.feedback_len,
                            action_len=tw.action_len, max_candidates=tw.max_candidates,
                            key=key, greedy=greedy, encoder=self.encoder)

    def train_seeds(self, step: int) -> List[int]:
        rng = np.random.default_rng([self.config.seed, step])
        n = len(self.games["train"])
        return [int(s) for s in rng.choice(n, self.config.rollout.num_groups, replace=False)]

    def _calibrate(self, params, batch, host_states, key):
        """FACTOR's value calibration on the training games (host_calibration)."""
        tw, fc = self.config.textworld, self.config.factor

        def play(states, k):   # always len(self.train_env) states (host_calibrate fills up)
            return host_rollout_from(self.policy, params, self.train_env, self.tokenizer, states,
                                     max_turns=tw.max_turns, obs_len=tw.obs_len,
                                     feedback_len=tw.feedback_len, action_len=tw.action_len,
                                     max_candidates=tw.max_candidates, key=k,
                                     encoder=self.encoder)[0]
        return host_calibrate(play, batch, host_states, key, fc.calib_turns,
                              fc.calib_rollouts, chunk=len(self.train_env))

    def step(self, state, step: int):
        """One training step: host rollout (+ calibration), then the jitted credit + update."""
        k_roll, k_learn, k_cal = jax.random.split(jax.random.fold_in(self.key, step), 3)
        t0 = time.time()
        batch, host_states = self._rollout(state.params, self.train_env,
                                           self.train_seeds(step),
                                           self.config.rollout.group_size, k_roll)
        t1 = time.time()
        if self.calibrates:
            batch = batch.replace(calibration=self._calibrate(state.params, batch,
                                                              host_states, k_cal))
        t2 = time.time()
        state, metrics = self.learn(state, batch, k_learn)
        m = to_host(metrics)
        m.update({"time/rollout_s": t1 - t0, "time/calibration_s": t2 - t1,
                  "time/learn_s": time.time() - t2})
        if "max_score" in batch.final_info:
            m["rollout/env/norm_score"] = host_metrics(batch)["env/norm_score"]
        return state, m

    def evaluate(self, params) -> Dict[str, float]:
        """Held-out games, eval_episodes episodes each, fixed key (sampled or greedy)."""
        tw = self.config.textworld
        batch, _ = self._rollout(params, self.eval_env, list(range(len(self.games["eval"]))),
                                 tw.eval_episodes, self.eval_key,
                                 greedy=self.config.train.eval_greedy)
        return {f"eval/{k}": v for k, v in host_metrics(batch).items()}

    def summary_extra(self):
        return {"env": "textworld", "train_games": len(self.games["train"]),
                "eval_games": len(self.games["eval"]),
                "candidates_dropped": dict(self.encoder.stats)}

    def close(self):
        self.train_env.close()
        self.eval_env.close()


def train_host(config, return_params: bool = False):
    """Runs config.train.steps host-rollout steps with trainer.run_training's loop
    (checkpoints, resume, non-finite guard, logs); returns the summary dict."""
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    return run_training(config, HostExperiment(config), return_params)
