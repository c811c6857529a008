"""The one training driver, for JAX-native environments and host-side games alike.

    summary = train(config, method)                        # JAX-native environment
    summary = train(config, method, source=HostGames(...)) # real games on the host

`method` is a `Method` record (experiments/registry.py maps config.method to it). The
driver builds everything once with `build_learner` (model, policy, mesh, credit,
optimiser, train state placed on the mesh), asks the rollout source for its step and its
held-out evaluation, and runs the loop: checkpoints, resume, the non-finite guard,
logging, the summary. A rollout source is the small interface `RolloutSource` below:
`JaxEnvSource` runs rollout -> credit -> update as one compiled call;
`asct_jax.rl.host_games.HostGames` plays the games on the host and hands the batch to
the compiled learn step. The step's key is fold_in(key(seed), step), so a resumed run
replays exactly the same keys as an uninterrupted one.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Dict, Optional, Protocol, Sequence, Tuple

from absl import logging as absl_logging
import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from asct_jax.envs import make as make_env
from asct_jax.envs.projection import Tags
from asct_jax.envs.prompt import PromptTokens
from asct_jax.envs.text_interface import LLMView
from asct_jax.envs.tokenizer import TAG_TOKENS, tag_ids
from asct_jax.infra import compile_cache, distributed, resources
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.checkpoint import Checkpointer, check_finite, start_or_resume
from asct_jax.infra.config_cli import config_to_dict
from asct_jax.infra.run_logger import RunLogger
from asct_jax.models import Decoder, get_preset
from asct_jax.models.loading import load_pretrained, load_tokenizer, resolve_model_path
from asct_jax.rl.credit import CreditContext, Method
from asct_jax.rl.generation import GenerationPolicy, GenerationSpec
from asct_jax.rl.learner import Learner
from asct_jax.rl.params_io import load_params
from asct_jax.rl.policy import Policy
from asct_jax.rl.ppo_config import ppo_config
from asct_jax.rl.train_step import (SEED_AXIS, TrainState, fsdp_shardings, join_params,
                                    make_eval, make_mesh, make_optimizer,
                                    make_seeds_train_step, make_train_step, policy_params,
                                    split_params, to_host, to_host_seeds)

MODEL_FIELDS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                "intermediate_size")
TRAINING_FIELDS = ("dtype", "remat", "attention_block", "value_detached", "lora_rank",
                   "lora_alpha", "lora_targets")
PLOT_KEYS = ("rollout/return", "eval/env/score", "eval/env/success", "train/loss",
             "credit/aux_tokens", "train/approx_kl")

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


def generation_spec(config, shape: TextShape, prompt: PromptTokens = PromptTokens()):
    """The GenerationSpec of config.actor, or None for the candidate-scoring actor: for the
    tiny actor over the environment's words (tags appended after them), for a pretrained
    model in the layout of its chat view (prompt.generation)."""
    actor = config.get("actor", {})
    if actor.get("chooser", "candidates") == "candidates":
        return None
    pieces = prompt.generation
    think = str(actor.get("think", "required"))
    if config.model.get("path") and think != "required":
        raise ConfigError("actor.think", f"{think!r} is for the tiny actor; the pretrained "
                          "actor's instruction (verl-agent's) asks for the think tags",
                          "required")
    if config.model.get("path") and pieces is None:
        raise ConfigError("actor.chooser", "'generate' with a pretrained model (model.path) "
                          "needs a text view that gives its prompt layout; this source has "
                          "none", "candidates")
    if pieces is None:
        tags, stop, pieces = Tags(*((i,) for i in tag_ids(shape.base_vocab_size))), None, None
    else:
        tags, stop = pieces.tags, pieces.stop_id
    extra = {k: v for k, v in (("stop_id", stop), ("pieces", pieces)) if v is not None}
    return GenerationSpec(tags=tags, response_len=int(actor.response_len),
                          history=int(actor.history), temperature=float(actor.temperature),
                          top_p=float(actor.top_p),
                          invalid_penalty=float(actor.invalid_penalty),
                          continuations=str(actor.get("continuations", "chooser")),
                          think=think, logits_chunk=int(actor.get("logits_chunk", 2 ** 24)),
                          **extra)


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


def build_policy(config, vocab_size: int, shape: TextShape,
                 prompt: PromptTokens = PromptTokens()) -> Tuple[Policy, Any]:
    """The decoder and its Policy: the preset (+ config.model overrides) from scratch over
    `vocab_size` tokens, or the pretrained weights of config.model.path.

    Returns (policy, params): params is an nnx.State, or with LoRA (model.lora_rank > 0)
    a tuple (trainable, frozen): the adapters and the new value head, then the base.
    """
    spec = generation_spec(config, shape, prompt)
    if spec is not None and not config.model.get("path"):   # tags after the env's words
        vocab_size = shape.base_vocab_size + len(TAG_TOKENS)
    training = {f: config.model[f] for f in TRAINING_FIELDS if f in config.model}
    if "lora_targets" in training:
        training["lora_targets"] = tuple(training["lora_targets"])
    if config.model.get("path"):
        dtype = training.pop("dtype", "float32")
        model, _ = load_pretrained(resolve_model_path(config.model.path), dtype,
                                   seed=config.seed, **training)
    else:
        overrides = {f: config.model[f] for f in MODEL_FIELDS if config.model.get(f)}
        seq = shape.obs_len + shape.feedback_len + shape.action_len + 2
        if spec is not None:
            seq = (spec.prompt_len(shape.obs_len, shape.num_actions, shape.action_len)
                   + shape.feedback_len + spec.response_len + 2)
        if "dtype" in training:
            training["param_dtype"] = training["dtype"]
        mcfg = get_preset(config.model.preset, vocab_size=vocab_size,
                          max_seq_len=max(seq, 16), **overrides, **training)
        model = Decoder(mcfg, rngs=nnx.Rngs(config.seed))
    if model.config.lora_rank:
        trainable = nnx.Any(nnx.LoRAParam, nnx.PathContains("value_head"))
        graphdef, params, frozen = nnx.split(model, trainable, ...)
        params = (params, frozen)
    else:
        graphdef, params = nnx.split(model)
    if spec is not None:
        return GenerationPolicy(graphdef, model.config.vocab_size, spec, shape.obs_len,
                                shape.action_len, shape.num_actions, shape.feedback_len,
                                prompt), params
    policy = Policy(graphdef, model.config.vocab_size, shape.obs_len, shape.action_len,
                    shape.feedback_len, prompt,
                    label_score=config.get("policy", {}).get("label_score", "sum"))
    return policy, params


# Folded into key(seed) for the method state's initialisation (the steps use 0, 1, ...).
_METHOD_STATE_KEY = 2**31 - 1


def build_learner(config, method: Method, source: RolloutSource,
                  seed_axis: Optional[str] = None) -> Learner:
    """Model, policy, mesh, credit, optimiser and the initial state of a run (method
    state included), placed with fsdp_shardings (replicated unless train.fsdp > 1)
    (seed_axis: the vmapped seed axis when the run is part of a seed batch).
    train.init_from: the params start from that warm start
    (asct_jax.rl.params_io.load_params), the optimiser state is fresh. The method's
    and the update's typed configs are built (and validated) first."""
    method.make_config(config)   # configuration errors before the model is built
    source.check(method)
    policy, params = build_policy(config, source.vocab_size, source.shape, source.prompt)
    params, frozen = split_params(params)
    if config.train.get("init_from"):   # a warm start: its params, fresh optimiser, step 0
        params = load_params(config.train.init_from, params)
    return learner_for_policy(config, method, policy, join_params(params, frozen),
                              source.env, source.env_params, seed_axis)


def learner_for_policy(config, method: Method, policy: Policy, params: Any, env: Any = None,
                       env_params: Any = None, seed_axis: Optional[str] = None) -> Learner:
    """The Learner of a built policy and its parameters (join_params form): mesh, typed
    configs, credit, auxiliary loss, optimiser and the initial TrainState (method state
    included) placed with fsdp_shardings. env: the JAX-native environment credit methods
    may restore states in (None for host games)."""
    method_cfg = method.make_config(config)
    ppo = ppo_config(config)
    params, frozen = split_params(params)
    mesh = make_mesh(config.train.num_devices or None, config.train.get("fsdp", 1))
    replicated = NamedSharding(mesh, P())
    ctx = CreditContext(policy=policy, env=env, env_params=env_params,
                        group_size=config.rollout.group_size, seed_axis=seed_axis)
    optimizer = make_optimizer(ppo)
    key = jax.random.key(config.seed)
    method_state = (method.init_state(method_cfg, ctx, join_params(params, frozen),
                                      jax.random.fold_in(key, _METHOD_STATE_KEY))
                    if method.stateful else None)
    # Placed up front with the step's in/out shardings: the step compiles once.
    state = TrainState(params=params, opt_state=optimizer.init(params),
                       step=jnp.zeros((), jnp.int32), frozen=frozen,
                       method_state=method_state)
    sharding = fsdp_shardings(state, mesh)
    # The KL reference: a copy (never aliased to the donated state), sharded like params.
    ref_params = (distributed.device_put(params, sharding.params, may_alias=False)
                  if ppo.kl_coef > 0 else None)
    return Learner(ppo=ppo, num_groups=config.rollout.num_groups,
                   group_size=config.rollout.group_size, policy=policy, mesh=mesh,
                   method=method, method_config=method_cfg, ctx=ctx,
                   credit_fn=method.make_credit(method_cfg, ctx),
                   aux_loss_fn=method.make_aux_loss(method_cfg, ctx),
                   policy_loss_fn=method.make_policy_loss(method_cfg, ctx), optimizer=optimizer,
                   init_state=distributed.device_put(state, sharding), state_sharding=sharding,
                   ref_params=ref_params, key=distributed.device_put(key, replicated))


def build_env(config, held_out: bool = False):
    """(env, env_params) of config.env: name, size and the env's own option fields; with
    a pretrained model (config.model.path) the environment is shown to it as text in its
    tokenizer (LLMView, config.text). held_out: with config.env.eval_options on top (the
    held-out evaluation's environment, e.g. ragspace's test split)."""
    options = dict(config.env.get("options", {}))
    if held_out:
        options.update(dict(config.env.get("eval_options", {})))
    env, env_params = make_env(config.env.name, size=config.env.size, **options)
    if config.model.get("path"):
        t = config.text
        env = LLMView(env, env_params, load_tokenizer(resolve_model_path(config.model.path)),
                      system_prompt=t.system_prompt, obs_len=t.obs_len,
                      action_len=t.action_len, feedback_len=t.feedback_len)
    return env, env_params


def held_out_env(config, source):
    """(env, env_params) of the held-out evaluation: the source's, or with
    config.env.eval_options applied (build_env(held_out=True))."""
    if not config.env.get("eval_options"):
        return source.env, source.env_params
    return build_env(config, held_out=True)


class JaxEnvSource:
    """A JAX-native environment: rollout, credit and update are one compiled step."""

    def __init__(self, config):
        self.config = config
        self.env, self.env_params = build_env(config)
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
        """Held-out episodes from a fixed key (config.train.eval_seed): every method and
        seed is evaluated on the same tasks."""
        tc = self.config.train
        env, env_params = held_out_env(self.config, self)
        eval_fn = distributed.aligned(make_eval(
            learner.policy, env, env_params, tc.eval_episodes, learner.mesh,
            greedy=tc.eval_greedy, state_sharding=learner.state_sharding), "evaluate")
        key = distributed.device_put(jax.random.key(tc.eval_seed), learner.replicated)

        def evaluate(params):
            trainable, frozen = split_params(params)
            return {f"eval/{k}": v for k, v in to_host(eval_fn(trainable, frozen, key)).items()}
        return evaluate

    def summary_extra(self) -> Dict[str, Any]:
        return {"env": self.config.env.name}

    def close(self) -> None:
        pass


@dataclasses.dataclass
class _RunFiles:
    """One run's results/<experiment>/<run>/: checkpoints, metrics log, summary."""

    config: Any
    ckpt: Checkpointer
    logger: Optional[RunLogger] = None

    @classmethod
    def open(cls, config) -> "_RunFiles":
        tc = config.train
        run_dir = os.path.join(tc.results_dir, tc.experiment, tc.run)
        return cls(config, Checkpointer(os.path.join(run_dir, "checkpoints"),
                                        save_every=tc.checkpoint_every, keep=tc.keep))

    def restore(self, state):
        """(state, first step): the latest checkpoint's if resuming, else `state`; the
        frozen base is not in checkpoints and is carried over."""
        tc = self.config.train
        restored, start = start_or_resume(self.ckpt, state.replace(frozen=None), tc.resume)
        state = restored.replace(frozen=state.frozen)
        self.logger = RunLogger(tc.results_dir, tc.experiment, tc.run, self.config,
                                total_steps=tc.steps, resume_step=start if tc.resume else None,
                                progress=tc.progress,
                                progress_keys=("rollout/return", "eval/env/score"))
        return state, start

    def finish(self, extra: Dict[str, Any], wall_clock_s: float) -> Dict[str, Any]:
        summary = _summary(self.config, self.logger.records, extra, wall_clock_s)
        self.logger.write_summary(summary)
        self.logger.plot([k for k in PLOT_KEYS if any(k in r for r in self.logger.records)])
        self.logger.close()
        self.ckpt.close()
        return summary


def _loop(runs, state, start: int, step_fn, evaluate, seed_slice) -> Tuple[Any, float]:
    """The training loop shared by single runs and seed batches; returns (state, seconds).

    step_fn(state, step) -> (state, [host metrics per run]); evaluate(policy params) ->
    [per run]; seed_slice(state, i) -> the state of run i (what its checkpoint holds,
    without the frozen base).
    """
    tc = runs[0].config.train
    t0 = time.time()
    if start == 0:
        for r, m in zip(runs, evaluate(policy_params(state))):
            r.logger.log(0, m)
    for step in range(start, tc.steps):
        state, metrics = step_fn(state, step)
        for r, m in zip(runs, metrics):
            check_finite(step + 1, {k: v for k, v in m.items() if k.startswith("train/")},
                         r.ckpt.latest_step())
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            for m, e in zip(metrics, evaluate(policy_params(state))):
                m.update(e)
        last = step + 1 == tc.steps   # the final state is always kept
        for i, (r, m) in enumerate(zip(runs, metrics)):
            r.logger.log(step + 1, m)
            if r.ckpt.should_save(step + 1) or last:
                r.ckpt.save(step + 1, seed_slice(state.replace(frozen=None), i),
                            extra={"step": step + 1}, force=last)
    return state, time.time() - t0


def train(config, method: Method, source: Optional[RolloutSource] = None,
          return_params: bool = False, return_state: bool = False):
    """Runs config.train.steps steps (resuming if asked) and writes the run's results.

    Returns the summary dict (and the final policy parameters if `return_params`, the
    final TrainState, method state included, if `return_state`).
    """
    _start_logging_and_cache(config)
    cache_before = compile_cache.counts()
    source = JaxEnvSource(config) if source is None else source
    try:
        learner = build_learner(config, method, source)
        step_fn, evaluate = source.make_step(learner), source.make_eval(learner)
        run = _RunFiles.open(config)
        state, start = run.restore(learner.init_state)

        def step_one(state, step):
            state, m = step_fn(state, step)
            return state, [m]
        state, wall = _loop([run], state, start, step_one, lambda p: [evaluate(p)],
                            lambda state, i: state)
        summary = run.finish({**source.summary_extra(), **_cache_use(cache_before)}, wall)
    finally:
        source.close()
    if return_state:
        return summary, state
    return (summary, policy_params(state)) if return_params else summary


def train_seeds(configs: Sequence[Any], method: Method, return_params: bool = False):
    """Trains the runs of `configs`, which differ only in seed and train.run, as ONE
    compiled program on their JAX-native environment (the step vmapped over seeds).

    Each run writes the same results/<experiment>/<run>/ as `train` would; its metrics
    equal its separate run's to float tolerance (batched matmuls may round differently).
    Returns the summaries (with the final parameters of each if `return_params`).
    """
    _check_seed_batch(configs)
    config = configs[0]
    _start_logging_and_cache(config)
    cache_before = compile_cache.counts()
    source = JaxEnvSource(config)
    learners = [build_learner(c, method, source, seed_axis=SEED_AXIS) for c in configs]
    first = learners[0]
    runs = [_RunFiles.open(c) for c in configs]
    restored = [r.restore(l.init_state) for r, l in zip(runs, learners)]
    starts = {start for _, start in restored}
    if len(starts) > 1:
        raise ValueError(f"train.resume: the seeds stopped at different steps {sorted(starts)}; "
                         "resume them as separate runs")
    state, sharding, keys = seed_batch(learners, [st for st, _ in restored])
    seeds_step = distributed.aligned(
        make_seeds_train_step(first, source.env, source.env_params, sharding), "train_step")
    tc = config.train
    eval_env, eval_params = held_out_env(config, source)
    eval_fn = distributed.aligned(make_eval(
        first.policy, eval_env, eval_params, tc.eval_episodes, first.mesh,
        greedy=tc.eval_greedy, seeds=True, state_sharding=sharding), "evaluate")
    eval_key = distributed.device_put(jax.random.key(tc.eval_seed), first.replicated)
    n = len(configs)

    def step_fn(state, step):
        t0 = time.time()
        state, m = seeds_step(state, keys)
        ms = to_host_seeds(m, n)
        for m in ms:
            m["time/step_s"] = time.time() - t0   # the whole seed batch's step
        return state, ms

    def evaluate(params):
        trainable, frozen = split_params(params)
        return [{f"eval/{k}": v for k, v in m.items()}
                for m in to_host_seeds(eval_fn(trainable, frozen, eval_key), n)]

    state, wall = _loop(runs, state, starts.pop(), step_fn, evaluate,
                        lambda state, i: jax.tree.map(lambda x: x[i], state))
    extra = {**source.summary_extra(), **_cache_use(cache_before), "seed_batch": len(configs)}
    summaries = [r.finish(extra, wall) for r in runs]
    if return_params:
        return [(s, policy_params(state.replace(
                    params=jax.tree.map(lambda x: x[i], state.params))))
                for i, s in enumerate(summaries)]
    return summaries


def seed_batch(learners: Sequence[Learner], states: Sequence[Any]):
    """The seeds' train states stacked on a leading seed axis (params, optimiser states,
    steps; the frozen base shared) and placed on the first learner's mesh, with their
    stacked keys: the inputs of make_seeds_train_step -> (state, sharding, keys)."""
    first = learners[0]
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    state = jax.tree.map(stack, *[st.replace(frozen=None) for st in states])
    state = state.replace(frozen=states[0].frozen)
    sharding = fsdp_shardings(state, first.mesh)
    state = distributed.device_put(state, sharding)
    keys = distributed.device_put(jax.tree.map(stack, *[l.key for l in learners]),
                                  first.replicated)
    return state, sharding, keys


def _start_logging_and_cache(config) -> None:
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    compile_cache.enable(config.train.get("compilation_cache", ""))


def _cache_use(before: Dict[str, float]) -> Dict[str, float]:
    """Persistent-cache hits / misses / compile seconds saved during this run."""
    now = compile_cache.counts()
    return {f"compile/cache_{k}": now[k] - before[k] for k in now}


def _check_seed_batch(configs: Sequence[Any]) -> None:
    """The runs of a seed batch must differ in seed and train.run only."""
    def rest(c):
        d = config_to_dict(c)
        d.pop("seed")
        d["train"].pop("run")
        return d
    if not configs:
        raise ValueError("train_seeds: no runs given")
    if any(rest(c) != rest(configs[0]) for c in configs[1:]):
        raise ValueError("train_seeds: the configs differ in more than seed and train.run")


def _summary(config, records, extra: Dict[str, Any], wall_clock_s: float) -> Dict[str, Any]:
    """Initial / final held-out metrics, total costs and wall clock of a run's records."""
    total = lambda key: sum(r.get(key) or 0.0 for r in records)  # noqa: E731
    first, last = records[0], records[-1]
    return {
        "method": config.method, "seed": config.seed, "steps": config.train.steps, **extra,
        **{k.replace("eval/", "initial/"): v for k, v in first.items() if k.startswith("eval/")},
        **{k.replace("eval/", "final/"): v for k, v in last.items() if k.startswith("eval/")},
        "total/aux_tokens": total("credit/aux_tokens"),
        "total/env_calls": total("rollout/env_calls") + total("credit/env_calls"),
        "total/rollout_env_calls": total("rollout/env_calls"),
        # The ASCT paper's ledger: T_aux = T_env + T_actor (0 for methods without them),
        # and the mean J_search over the steps (Eq. 5).
        "total/t_env": total("credit/t_env"),
        "total/t_actor": total("credit/t_actor"),
        "mean/j_search": total("credit/asct/j_search") / max(len(records), 1),
        "wall_clock_s": wall_clock_s,
        # The process's peak memory when the run ended (a seed batch's runs share it;
        # a resumed run's counts from its resumption): asct_jax.infra.resources.
        "peak_memory_gb": resources.peak_memory_gb(),
    }
