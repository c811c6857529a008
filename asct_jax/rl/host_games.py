"""Real text games driven on the host (TextWorld, ScienceWorld) as a rollout source.

    summary = trainer.train(run, method, source=HostGames(run, game_set))
    # run: a RunConfig; game_set: a GameSet (experiments/tables/textworld_run.py,
    # experiments/tables/scienceworld_run.py)

Each step plays B = rollout.num_groups * G episodes with `host_rollout` (num_groups
training games drawn without replacement, G episodes each) and hands the batch to the
jitted learn step (credit + PPO update). Held-out evaluation plays eval_episodes episodes
of every held-out game (games the policy never trains on) with a fixed key, so every
method and seed is evaluated on the same episodes. The shapes and counts come from the
game set's config section (config.textworld, config.scienceworld), typed as
`HostGameConfig` by the script that builds the GameSet.

A method that restores environment states inside the jitted step
(`Method.restores_states_in_step`: search, VinePPO) cannot run here. A method with a
`host_prepare` (FACTOR's TAC continuations) runs it on the host between the rollout
and the learn step and hands the result in with the batch (`Rollout.extras`).

The tokenizer lives in results/<experiment>/tokenizer (shared by the runs of an
experiment). The step's keys are fold_in(key(seed), step) and its training games come
from a NumPy generator seeded by (seed, step), so a resumed run replays the same steps.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional

import jax
import numpy as np

from asct_jax.envs.external import BatchedHostEnv, HostEnv, ParallelHostEnv
from asct_jax.envs.prompt import PromptTokens
from asct_jax.envs.tokenizer import word_feedback_frame
from asct_jax.infra.checks import ConfigError, Range
from asct_jax.infra.typed_config import option
from asct_jax.models.loading import load_tokenizer, resolve_model_path
from asct_jax.rl.credit import Method
from asct_jax.rl.host_rollout import HostShape, concat_rollouts, host_rollout, host_rollout_from
from asct_jax.rl.host_text import ChatCodec, CommandEncoder
from asct_jax.rl.host_tokenizer import game_texts, load_or_build_tokenizer
from asct_jax.rl.rollout import episode_metrics
from asct_jax.rl.learner import Learner
from asct_jax.rl.run_config import RunConfig, run_config
from asct_jax.rl.sources import EvalFn, StepFn, TextShape
from asct_jax.rl.train_step import make_learn_step, policy_params, to_host

_AT_LEAST_1 = Range(1, None, integer=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostGameConfig:
    """A game set's config section (textworld, scienceworld): what HostGames reads."""

    max_turns: int = option(_AT_LEAST_1, "turns per episode")
    obs_len: int = option(_AT_LEAST_1, "observation tokens kept (the last ones)")
    feedback_len: int = option(_AT_LEAST_1, "feedback tokens")
    action_len: int = option(Range(2, None, integer=True), "command tokens")
    max_candidates: int = option(_AT_LEAST_1, "K candidate commands")
    eval_episodes: int = option(_AT_LEAST_1, "sampled episodes per held-out game")
    tokenizer_episodes: int = option(Range(0, None, integer=True), "random episodes per "
                                     "game for the vocabulary")
    max_vocab: int = option(_AT_LEAST_1, "most words of the games' vocabulary")
    workers: int = option(Range(0, None, integer=True), "environments in worker processes "
                          "(0: in this process)", 0)
    eval_games_at_once: int = option(Range(0, None, integer=True), "held-out games played "
                                     "together (0: all)", 0)


@dataclasses.dataclass(frozen=True)
class GameSet:
    """A benchmark's games for HostGames.

    name: the env name ("textworld", "scienceworld"); settings: its config section's
      HostGameConfig.
    make_train / make_eval: picklable factories of one host environment over the training
      / held-out games (reset(seed) plays game seed % n).
    num_train / num_eval: the number of training / held-out games (seeds 0 .. n - 1).
    select: the candidate rule (commands, task text, game, turn) -> commands, or None
      (CommandEncoder's own cut).
    """

    name: str
    settings: HostGameConfig
    make_train: Callable[[], HostEnv]
    make_eval: Callable[[], HostEnv]
    num_train: int
    num_eval: int
    select: Optional[Callable] = None


def build_tokenizer_for(run: RunConfig, games: GameSet):
    """The word-level tokenizer of the games (built once per experiment, then loaded).

    Its vocabulary covers the texts of every game used (walkthrough + random episodes):
    words only, no rewards, like the fixed vocabulary of a pretrained model.
    """
    sec = games.settings
    directory = os.path.join(run.train.results_dir, run.train.experiment, "tokenizer")

    def texts():
        out = []
        for make, n in ((games.make_train, games.num_train), (games.make_eval, games.num_eval)):
            env = make()
            try:
                out += game_texts(env, range(n), random_episodes=sec.tokenizer_episodes,
                                  max_steps=sec.max_turns)
            finally:
                env.close()
        return out
    return load_or_build_tokenizer(directory, texts, max_vocab=sec.max_vocab)


def batched(make_env: Callable[[], HostEnv], num_envs: int, workers: int):
    """num_envs environments: in this process (workers 0) or in worker processes."""
    if workers > 0:
        return ParallelHostEnv(make_env, num_envs, min(int(workers), num_envs))
    return BatchedHostEnv([make_env() for _ in range(num_envs)])


def host_metrics(batch) -> Dict[str, float]:
    """episode_metrics plus the score as a fraction of the game's maximum."""
    m = to_host(episode_metrics(batch))
    info = batch.final_info
    if "max_score" in info:
        m["env/norm_score"] = float(np.mean(np.asarray(info["score"])
                                            / np.maximum(np.asarray(info["max_score"]), 1e-9)))
    return m


SYSTEM_PROMPT = ("You are playing a text adventure game. Read the observation and reply with "
                 "the next command.")


def _word_feedback_frame(tokenizer):
    """The feedback frame in the games' word vocabulary (tokenizer.word_feedback_frame)."""
    try:
        return word_feedback_frame(tokenizer)
    except ValueError as e:
        raise ValueError("the games' saved word tokenizer predates the feedback frame's "
                         "words: delete its directory to rebuild it") from e


class HostGames:
    """Games played on the host (a GameSet): a `trainer.RolloutSource`."""

    env = env_params = None   # no JAX-native environment to restore states in
    prompt = PromptTokens()   # the games' own word vocabulary (a ChatCodec's with a model)

    def __init__(self, run: RunConfig, games: GameSet):
        self.run = run = run_config(run)
        self.games = games
        if run.train.eval_split != "test":   # the game sets hold no validation games yet
            raise ConfigError("train.eval_split", f"{run.train.eval_split!r} is not "
                              f"available for the host games of {games.name}", "'test'")
        tw, rc = games.settings, run.rollout
        if rc.num_groups > games.num_train:
            raise ValueError(f"rollout.num_groups = {rc.num_groups} > the {games.num_train} "
                             f"training games of {games.name} (groups use distinct games)")
        if run.model.path:   # a pretrained model reads the games' text as is
            tokenizer = load_tokenizer(resolve_model_path(run.model.path))
            self.tokenizer = ChatCodec(tokenizer, run.text.system_prompt or SYSTEM_PROMPT)
            self.prompt = self.tokenizer.prompt_tokens()
        else:
            tokenizer = self.tokenizer = build_tokenizer_for(run, games)
            self.prompt = PromptTokens(feedback_frame=_word_feedback_frame(tokenizer))
        self.vocab_size = len(tokenizer)
        self.shape = TextShape(tw.obs_len, tw.action_len, tw.feedback_len,
                               num_actions=tw.max_candidates, base_vocab_size=self.vocab_size)
        self.host_shape = HostShape(max_turns=tw.max_turns, obs_len=tw.obs_len,
                                    feedback_len=tw.feedback_len, action_len=tw.action_len,
                                    max_candidates=tw.max_candidates)
        self.encoder = CommandEncoder(self.tokenizer, tw.action_len)
        workers = int(tw.workers)
        self.train_env = batched(games.make_train, rc.num_groups * rc.group_size, workers)
        # Held-out games played eval_games_at_once at a time (0: all; each game's episodes
        # need one environment each, a ScienceWorld one a Java process).
        at_once = int(tw.eval_games_at_once) or games.num_eval
        self.eval_chunk = min(at_once, games.num_eval)
        self.eval_env = batched(games.make_eval, self.eval_chunk * tw.eval_episodes, workers)

    def check(self, method: Method) -> None:
        if method.restores_states_in_step:
            raise ValueError(f"method: {method.name!r} restores environment states inside "
                             "the jitted step, which host games cannot serve")

    def train_seeds(self, step: int) -> List[int]:
        rng = np.random.default_rng([self.run.seed, step])
        n = self.games.num_train
        return [int(s) for s in rng.choice(n, self.run.rollout.num_groups, replace=False)]

    def make_step(self, learner: Learner) -> StepFn:
        """Host rollout (+ the method's host_prepare into batch.extras), then the jitted
        credit + update."""
        learn, policy, group_size = (make_learn_step(learner), learner.policy,
                                     self.run.rollout.group_size)
        prepare = learner.method.host_prepare

        def play_from(params):   # pi_old played on from stored states (always B of them)
            return lambda states, key: host_rollout_from(
                policy, params, self.train_env, self.tokenizer, states, self.host_shape,
                key=key, encoder=self.encoder, select=self.games.select)[0]

        def step(state, step_index):
            k_roll, k_learn, k_cal = jax.random.split(jax.random.fold_in(learner.key,
                                                                          step_index), 3)
            t0 = time.time()
            batch, host_states = host_rollout(
                policy, policy_params(state), self.train_env, self.tokenizer,
                self.train_seeds(step_index), self.host_shape,
                group_size=group_size, key=k_roll, encoder=self.encoder,
                select=self.games.select)
            t1 = time.time()
            if prepare is not None:
                extras = prepare(learner.method_config, play_from(policy_params(state)), batch,
                                 host_states, k_cal, len(self.train_env))
                if extras is not None:
                    batch = batch.replace(extras=extras)
            t2 = time.time()
            state, metrics = learn(state, batch, k_learn)
            m = to_host(metrics)
            m.update({"time/rollout_s": t1 - t0, "time/prepare_s": t2 - t1,
                      "time/learn_s": time.time() - t2})
            if "max_score" in batch.final_info:
                m["rollout/env/norm_score"] = host_metrics(batch)["env/norm_score"]
            return state, m
        return step

    def make_eval(self, learner: Learner) -> EvalFn:
        """Held-out games, eval_episodes episodes each, fixed key (sampled or greedy)."""
        tw, tc = self.games.settings, self.run.train
        key = jax.random.key(tc.held_out_seed)   # eval_seed: eval_split is "test" here

        def evaluate(params):
            games, n = list(range(self.games.num_eval)), self.eval_chunk
            games += games[:(-len(games)) % n]     # whole chunks; repeats are dropped below
            parts = []
            for c0 in range(0, len(games), n):
                batch, _ = host_rollout(learner.policy, params, self.eval_env,
                                        self.tokenizer, games[c0:c0 + n], self.host_shape,
                                        group_size=tw.eval_episodes,
                                        key=key if c0 == 0 else jax.random.fold_in(key, c0),
                                        greedy=tc.eval_greedy, encoder=self.encoder,
                                        select=self.games.select)
                parts.append(batch)
            batch = concat_rollouts(parts, self.games.num_eval * tw.eval_episodes)
            return {f"eval/{k}": v for k, v in host_metrics(batch).items()}
        return evaluate

    def summary_extra(self):
        return {"env": self.games.name, "eval_split": self.run.train.eval_split,
                "eval_key_seed": self.run.train.held_out_seed,
                "train_games": self.games.num_train,
                "eval_games": self.games.num_eval,
                "candidates_dropped": dict(self.encoder.stats),
                "env_stats": {"train": self.train_env.stats, "eval": self.eval_env.stats}}

    def close(self):
        self.train_env.close()
        self.eval_env.close()
