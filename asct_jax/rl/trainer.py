"""The one training loop, for JAX-native environments and host-side games alike.

    summary = train(run, method)                        # JAX-native environment
    summary = train(run, method, source=HostGames(...)) # real games on the host

`run` is the run's typed config (asct_jax.rl.run_config.RunConfig; a ConfigDict is typed
on entry, the edge) and `method` a `Method` record (experiments/harness/registry.py maps
config.method to it). The loop builds everything once with `build_learner`
(asct_jax.rl.build), asks the rollout source (asct_jax.rl.sources) for its step and its
held-out evaluation, and runs: checkpoints, resume, the non-finite guard, logging, the
summary. `JaxEnvSource` runs rollout -> credit -> update as one compiled call;
`asct_jax.rl.host_games.HostGames` plays the games on the host and hands the batch to
the compiled learn step. The step's key is fold_in(key(seed), step), so a resumed run
replays exactly the same keys as an uninterrupted one.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from absl import logging as absl_logging
import jax
import jax.numpy as jnp

from asct_jax.infra import compile_cache, distributed, resources
from asct_jax.infra.checkpoint import Checkpointer, check_finite, start_or_resume
from asct_jax.infra.run_logger import RunLogger
from asct_jax.rl.build import build_learner
from asct_jax.rl.credit import Method
from asct_jax.rl.learner import Learner
from asct_jax.rl.run_config import RunConfig, run_config
from asct_jax.rl.sources import JaxEnvSource, RolloutSource
from asct_jax.rl.train_step import (SEED_AXIS, fsdp_shardings, make_eval,
                                    make_prefit_step, make_seeds_train_step, policy_params,
                                    split_params, to_host, to_host_seeds)

PLOT_KEYS = ("rollout/return", "eval/env/score", "eval/env/success", "train/loss",
             "credit/aux_tokens", "train/approx_kl")


@dataclasses.dataclass
class _RunFiles:
    """One run's results/<experiment>/<run>/: checkpoints, metrics log, summary."""

    run: RunConfig
    ckpt: Checkpointer
    logger: Optional[RunLogger] = None

    @classmethod
    def open(cls, run: RunConfig) -> "_RunFiles":
        tc = run.train
        run_dir = os.path.join(tc.results_dir, tc.experiment, tc.run)
        return cls(run, Checkpointer(os.path.join(run_dir, "checkpoints"),
                                     save_every=tc.checkpoint_every, keep=tc.keep))

    def restore(self, state):
        """(state, first step): the latest checkpoint's if resuming, else `state`; the
        frozen base is not in checkpoints and is carried over."""
        tc = self.run.train
        restored, start = start_or_resume(self.ckpt, state.replace(frozen=None), tc.resume)
        state = restored.replace(frozen=state.frozen)
        self.logger = RunLogger(tc.results_dir, tc.experiment, tc.run, self.run.record,
                                total_steps=tc.steps, resume_step=start if tc.resume else None,
                                progress=tc.progress,
                                progress_keys=("rollout/return", "eval/env/score"))
        return state, start

    def finish(self, extra: Dict[str, Any], wall_clock_s: float) -> Dict[str, Any]:
        summary = _summary(self.run, self.logger.records, extra, wall_clock_s)
        self.logger.write_summary(summary)
        self.logger.plot([k for k in PLOT_KEYS if any(k in r for r in self.logger.records)])
        self.logger.close()
        self.ckpt.close()
        return summary


def _loop(files, state, start: int, step_fn, evaluate, seed_slice) -> Tuple[Any, float]:
    """The training loop shared by single runs and seed batches; returns (state, seconds).

    step_fn(state, step) -> (state, [host metrics per run]); evaluate(policy params) ->
    [per run]; seed_slice(state, i) -> the state of run i (what its checkpoint holds,
    without the frozen base).
    """
    tc = files[0].run.train
    t0 = time.time()
    if start == 0:
        for r, m in zip(files, evaluate(policy_params(state))):
            r.logger.log(0, m)
    for step in range(start, tc.steps):
        state, metrics = step_fn(state, step)
        for r, m in zip(files, metrics):
            check_finite(step + 1, {k: v for k, v in m.items() if k.startswith("train/")},
                         r.ckpt.latest_step())
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            for m, e in zip(metrics, evaluate(policy_params(state))):
                m.update(e)
        last = step + 1 == tc.steps   # the final state is always kept
        for i, (r, m) in enumerate(zip(files, metrics)):
            r.logger.log(step + 1, m)
            if r.ckpt.should_save(step + 1) or last:
                r.ckpt.save(step + 1, seed_slice(state.replace(frozen=None), i),
                            extra={"step": step + 1}, force=last)
    return state, time.time() - t0


def train(run: RunConfig, method: Method, source: Optional[RolloutSource] = None,
          return_params: bool = False, return_state: bool = False):
    """Runs run.train.steps steps (resuming if asked) and writes the run's results.

    Returns the summary dict (and the final policy parameters if `return_params`, the
    final TrainState, method state included, if `return_state`).
    """
    run = run_config(run, method)
    _start_logging_and_cache(run)
    cache_before = compile_cache.counts()
    source = JaxEnvSource(run) if source is None else source
    try:
        learner = build_learner(run, method, source)
        step_fn, evaluate = source.make_step(learner), source.make_eval(learner)
        files = _RunFiles.open(run)
        state, start = files.restore(learner.init_state)
        state, initial, prefit_s = _prefit(learner, source.env, source.env_params, state,
                                           start)

        def step_one(state, step):
            state, m = step_fn(state, step)
            return state, [m]
        state, wall = _loop([files], state, start, step_one,
                            _with_initial(lambda p: [evaluate(p)], initial),
                            lambda state, i: state)
        summary = files.finish({**source.summary_extra(), **_cache_use(cache_before)},
                               wall + prefit_s)
    finally:
        source.close()
    if return_state:
        return summary, state
    return (summary, policy_params(state)) if return_params else summary


def train_seeds(runs: Sequence[RunConfig], method: Method, return_params: bool = False):
    """Trains `runs`, which differ only in seed and train.run, as ONE compiled program on
    their JAX-native environment (the step vmapped over seeds).

    Each run writes the same results/<experiment>/<run>/ as `train` would; its metrics
    equal its separate run's to float tolerance (batched matmuls may round differently).
    Returns the summaries (with the final parameters of each if `return_params`).
    """
    runs = [run_config(r, method) for r in runs]
    _check_seed_batch(runs)
    run = runs[0]
    _start_logging_and_cache(run)
    cache_before = compile_cache.counts()
    source = JaxEnvSource(run)
    learners = [build_learner(r, method, source, seed_axis=SEED_AXIS) for r in runs]
    first = learners[0]
    files = [_RunFiles.open(r) for r in runs]
    restored = [f.restore(l.init_state) for f, l in zip(files, learners)]
    starts = {start for _, start in restored}
    if len(starts) > 1:
        raise ValueError(f"train.resume: the seeds stopped at different steps {sorted(starts)}; "
                         "resume them as separate runs")
    state, sharding, keys = seed_batch(learners, [st for st, _ in restored])
    start = starts.pop()
    state, initial, prefit_s = _prefit(first, source.env, source.env_params, state, start,
                                       keys, sharding, len(runs))
    seeds_step = distributed.aligned(
        make_seeds_train_step(first, source.env, source.env_params, sharding), "train_step")
    tc = run.train
    eval_env, eval_params = source.held_out
    eval_fn = distributed.aligned(make_eval(
        first.policy, eval_env, eval_params, tc.eval_episodes, first.mesh,
        greedy=tc.eval_greedy, seeds=True, state_sharding=sharding), "evaluate")
    eval_key = distributed.device_put(jax.random.key(tc.held_out_seed), first.replicated)
    n = len(runs)

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

    state, wall = _loop(files, state, start, step_fn, _with_initial(evaluate, initial),
                        lambda state, i: jax.tree.map(lambda x: x[i], state))
    extra = {**source.summary_extra(), **_cache_use(cache_before), "seed_batch": n}
    summaries = [f.finish(extra, wall + prefit_s) for f in files]
    if return_params:
        return [(s, policy_params(state.replace(
                    params=jax.tree.map(lambda x: x[i], state.params))))
                for i, s in enumerate(summaries)]
    return summaries


def _prefit(learner: Learner, env, env_params, state, start: int, keys=None,
            sharding=None, n: int = 1):
    """The method's prefit (Method.make_prefit, make_prefit_step) on a run that starts at
    step 0 (a resumed run's checkpoint holds its result) -> (state, [its step-0 metrics
    per run] or None, seconds). keys, sharding, n: a seed batch's stacked keys, state
    shardings and run count (None: one run, the learner's key)."""
    fit = None if start > 0 else make_prefit_step(
        learner, env, env_params, seeds=keys is not None, state_sharding=sharding)
    if fit is None:
        return state, None, 0.0
    t0 = time.time()
    state, m = distributed.aligned(fit, "prefit")(state, learner.key if keys is None else keys)
    ms = [to_host(m)] if keys is None else to_host_seeds(m, n)
    seconds = time.time() - t0
    for m in ms:
        m["time/prefit_s"] = seconds   # the compile included
    return state, ms, seconds


def _with_initial(evaluate, initial):
    """evaluate(params) -> [metrics per run], its first call's (the step-0 record of a run
    that starts at 0) joined with `initial` (_prefit's, one dict per run; None: evaluate)."""
    if not initial:
        return evaluate
    pending = [initial]

    def first_joined(params):
        out = evaluate(params)
        return [dict(m, **i) for m, i in zip(out, pending.pop())] if pending else out
    return first_joined


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


def _start_logging_and_cache(run: RunConfig) -> None:
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every save at INFO
    compile_cache.enable(run.train.compilation_cache)


def _cache_use(before: Dict[str, float]) -> Dict[str, float]:
    """Persistent-cache hits / misses / compile seconds saved during this run."""
    now = compile_cache.counts()
    return {f"compile/cache_{k}": now[k] - before[k] for k in now}


def _check_seed_batch(configs: Sequence[RunConfig]) -> None:
    """The runs of a seed batch must differ in seed and train.run only (their configs as
    given: RunConfig.record)."""
    def rest(c):
        d = {**c.record, "train": dict(c.record["train"])}
        d.pop("seed")
        d["train"].pop("run")
        return d
    if not configs:
        raise ValueError("train_seeds: no runs given")
    if any(rest(c) != rest(configs[0]) for c in configs[1:]):
        raise ValueError("train_seeds: the configs differ in more than seed and train.run")


def _summary(run: RunConfig, records, extra: Dict[str, Any], wall_clock_s: float
             ) -> Dict[str, Any]:
    """Initial / final held-out metrics, total costs and wall clock of a run's records."""
    total = lambda key: sum(r.get(key) or 0.0 for r in records)  # noqa: E731
    first, last = records[0], records[-1]
    # J_search (Eq. 5) per step, mean over the steps that logged it (not the initial
    # evaluation's record); ASCT's before issue 38 as credit/asct/j_search.
    js = [r.get("credit/j_search", r.get("credit/asct/j_search")) for r in records]
    js = [x for x in js if x is not None]
    # The ASCT paper's Table 3 ledger (asct_jax.search.ledger), totalled over the steps;
    # the optimizer's forwards are ppo.epochs passes over each step's decisions.
    ledger = sorted({k for r in records for k in r if k.startswith("credit/ledger/")})
    totals = {k.replace("credit/", "total/", 1): total(k) for k in ledger}
    totals.update({k.replace("optimizer_pass", "optimizer_forwards"): run.ppo.epochs * v
                   for k, v in totals.items() if "/optimizer_pass/" in k})
    return {
        "method": run.method, "seed": run.seed, "steps": run.train.steps, **extra,
        **{k.replace("eval/", "initial/"): v for k, v in first.items() if k.startswith("eval/")},
        **{k.replace("eval/", "final/"): v for k, v in last.items() if k.startswith("eval/")},
        # A method's prefit (Method.make_prefit) is charged to its run: prefit/*, step 0.
        "total/aux_tokens": total("credit/aux_tokens") + total("prefit/aux_tokens"),
        "total/env_calls": (total("rollout/env_calls") + total("credit/env_calls")
                            + total("prefit/env_calls")),
        "total/rollout_env_calls": total("rollout/env_calls"),
        # The ASCT paper's ledger: T_aux = T_env + T_actor (0 for methods without them),
        # and the mean J_search over the steps (Eq. 5).
        "total/t_env": total("credit/t_env"),
        "total/t_actor": total("credit/t_actor"),
        "mean/j_search": sum(js) / max(len(js), 1),
        **totals,
        "wall_clock_s": wall_clock_s,
        # The process's peak memory when the run ended (a seed batch's runs share it;
        # a resumed run's counts from its resumption): asct_jax.infra.resources.
        "peak_memory_gb": resources.peak_memory_gb(),
    }
