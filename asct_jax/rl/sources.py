"""Where a run's episodes come from: the `RolloutSource` interface and the JAX-native
environment's (`JaxEnvSource`: rollout, credit and update as one compiled step).

    source = JaxEnvSource(run)          # run: asct_jax.rl.run_config.RunConfig
    step = source.make_step(learner)    # learner: asct_jax.rl.build.build_learner

Host-side games are the other source (asct_jax.rl.host_games.HostGames).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Dict, Protocol, Tuple

import jax

from asct_jax.envs import make as make_env
from asct_jax.envs.prompt import PromptTokens
from asct_jax.envs.questions import question_env
from asct_jax.envs.text_interface import LLMView
from asct_jax.infra import distributed
from asct_jax.models.loading import load_tokenizer, resolve_model_path
from asct_jax.rl.credit import Method
from asct_jax.rl.learner import Learner
from asct_jax.rl.run_config import VALIDATION_QUESTIONS, RunConfig, run_config
from asct_jax.rl.train_step import TrainState, make_eval, make_train_step, split_params, to_host

StepFn = Callable[[TrainState, int], Tuple[TrainState, Dict[str, float]]]
EvalFn = Callable[[Any], Dict[str, float]]


@dataclasses.dataclass(frozen=True)
class TextShape:
    """Token lengths the policy reads and writes: observation O, action A, feedback F;
    K candidate actions and the word vocabulary before any tag token (what a generating
    actor's prompt and tags are built from; 0 where unknown)."""

    obs_len: int
    action_len: int
    feedback_len: int
    num_actions: int = 0
    base_vocab_size: int = 0


class RolloutSource(Protocol):
    """Where a run's episodes come from.

    vocab_size, shape, prompt: what the policy is built for. env / env_params: the
    JAX-native environment credit methods may restore states in (None for host games).
    check(method): raises ValueError (one line) if the source cannot serve the method.
    make_step(learner) -> step(state, step_index) -> (state, host metrics)
      (learner: asct_jax.rl.learner.Learner).
    make_eval(learner) -> evaluate(params) -> {"eval/...": float}.
    """

    vocab_size: int
    shape: TextShape
    prompt: PromptTokens
    env: Any
    env_params: Any

    def check(self, method: Method) -> None: ...
    def make_step(self, learner: "Learner") -> StepFn: ...
    def make_eval(self, learner: "Learner") -> EvalFn: ...
    def summary_extra(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...


def build_env(run: RunConfig, held_out: bool = False):
    """(env, env_params) of run.env: name, size and the env's own option fields; with a
    pretrained model (run.model.path) the environment is shown to it as text in its
    tokenizer (LLMView, run.text). held_out: with run.env.eval_options on top (the
    held-out evaluation's environment, e.g. ragspace's test split), and under
    train.eval_split "validation" an environment with a question split
    (asct_jax.envs.questions.QuestionEnv) on its validation split instead."""
    run = run_config(run)
    options = dict(run.env.options)
    if held_out:
        options.update(dict(run.env.eval_options))
    env, env_params = make_env(run.env.name, size=run.env.size, **options)
    if held_out and validation_questions(run, env):   # the one place the split switches
        options["split"] = VALIDATION_QUESTIONS
        env, env_params = make_env(run.env.name, size=run.env.size, **options)
    if run.model.path:
        t = run.text
        env = LLMView(env, env_params, load_tokenizer(resolve_model_path(run.model.path)),
                      system_prompt=t.system_prompt, obs_len=t.obs_len,
                      action_len=t.action_len, feedback_len=t.feedback_len)
    return env, env_params


def validation_questions(run: RunConfig, env: Any) -> bool:
    """Whether the held-out episodes of `run` play the validation split of env's question
    pool: train.eval_split "validation" and env has a question split (any other env's
    validation episodes differ from the test ones by their key alone)."""
    return run.train.eval_split == "validation" and question_env(env) is not None


def held_out_env(run: RunConfig, source):
    """(env, env_params) of the held-out evaluation: the source's, or with
    run.env.eval_options applied / the validation questions (build_env(held_out=True))."""
    run = run_config(run)
    if not run.env.eval_options and not validation_questions(run, source.env):
        return source.env, source.env_params
    return build_env(run, held_out=True)


def eval_summary(run: RunConfig, env: Any, env_params: Any) -> Dict[str, Any]:
    """Which episodes a run's held-out evaluation played (for its summary): eval_split, the
    key's seed and, for an env with a question split, that split's name and qid range."""
    tc = run.train
    out: Dict[str, Any] = {"eval_split": tc.eval_split, "eval_key_seed": tc.held_out_seed}
    qenv = question_env(env)
    if qenv is not None:
        lo, hi = qenv.split_range(env_params)
        out.update(eval_questions=[int(lo), int(min(hi, lo + tc.eval_episodes))],
                   eval_question_split=str(getattr(env_params, "split", "")))
    return out


class JaxEnvSource:
    """A JAX-native environment: rollout, credit and update are one compiled step.
    run: a RunConfig (or a ConfigDict, typed here)."""

    def __init__(self, run: RunConfig):
        self.run = run = run_config(run)
        self.env, self.env_params = build_env(run)
        self.vocab_size = len(self.env.tokenizer)
        self.shape = TextShape(self.env.obs_len, self.env.action_len, self.env.feedback_len,
                               self.env.num_actions, self.vocab_size)
        self.prompt = (self.env.prompt_tokens() if isinstance(self.env, LLMView)
                       else PromptTokens())

    def check(self, method: Method) -> None:
        pass  # every method runs here: states are pytrees, restoring one is keeping it

    def make_step(self, learner: Learner) -> StepFn:
        step_fn = distributed.aligned(make_train_step(learner, self.env, self.env_params),
                                      "train_step")

        def step(state, step_index):
            t0 = time.time()
            state, metrics = step_fn(state, learner.key)
            m = to_host(metrics)   # waits for the step
            m["time/step_s"] = time.time() - t0   # the first includes the compile
            return state, m
        return step

    def make_eval(self, learner: Learner) -> EvalFn:
        """Held-out episodes from a fixed key (train.eval_seed, or validation_seed under
        train.eval_split "validation"): every method and seed is evaluated on the same
        tasks."""
        tc = self.run.train
        env, env_params = self.held_out
        eval_fn = distributed.aligned(make_eval(
            learner.policy, env, env_params, tc.eval_episodes, learner.mesh,
            greedy=tc.eval_greedy, state_sharding=learner.state_sharding), "evaluate")
        key = distributed.device_put(jax.random.key(tc.held_out_seed), learner.replicated)

        def evaluate(params):
            trainable, frozen = split_params(params)
            return {f"eval/{k}": v for k, v in to_host(eval_fn(trainable, frozen, key)).items()}
        return evaluate

    @functools.cached_property
    def held_out(self):
        """(env, env_params) of the held-out evaluation (held_out_env), built once."""
        return held_out_env(self.run, self)

    def summary_extra(self) -> Dict[str, Any]:
        return {"env": self.run.env.name, **eval_summary(self.run, *self.held_out)}

    def close(self) -> None:
        pass
