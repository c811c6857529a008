"""Tree-search throughput: asct_jax.search vs mctx on the same environment.

Not a test: a script that measures, side by side in one process, for every batch size B
and simulation count N:
  * paper_agentuct: the ASCT paper's search (asct_jax.search.methods.paper_rules("agentuct"):
    cost term, cost-weighted expansion and rule continuations to the end, no depth cap) with an
    execution cache when the environment is a staged workflow (ragspace): no actor pass
    but the root prior; paper_agentuct_actor: the same with pi_old continuations
    (ASCT-ActorRollout's suffixes). Their ratio with policy tiny is what rule
    continuations save; trials/s = B * N / steady-state seconds.
  * mctx_muzero: mctx.muzero_policy;
  * mctx_gumbel: mctx.gumbel_muzero_policy (max_num_considered_actions = K);
each mctx policy with a recurrent_fn that steps the same environment (the embedding is
the environment state; reward and discount = 1 - done come from the step; prior logits
and value from the same policy_fn). The search depth is the episode length (env.max_turns)
for every method. Compile time (lower + compile) is reported apart from steady-state time
(median of repeated calls after one warm-up, each blocked until ready); throughput is
simulations per second = B * N / steady-state seconds.

step_method (an ASCT method of the paper, e.g. asct_agentuct; on ragspace with the tiny
decoder, experiments/configs/asct_ragspace.py's quick config at step_batch episodes):
the share of one compiled training step spent in the search. It times the whole step
(rollout -> credit -> PPO update, as trainer.train runs it, the method's cache carried
from step to step), then, at the same batch, the rollout alone and the credit's search
alone (every visited state of a rollout batch, B = asct.trials trials each, the cache the
steps left), each compile (lower + compile) apart from steady state (median of repeated
calls after one warm-up).

The policy: on toy_tree a fixed random logits table; on other environments pi_old is
uniform over the legal candidates with value 0 (the benchmark measures the search, not a
network), or with policy tiny the tiny decoder: the ratio of the two runs' times is the
share of the search spent outside the policy's forward passes.

Usage:
  python -m experiments.bench.search [--config.env=toy_tree] [--config.batch_sizes=256,1024]
      [--config.num_simulations=16,64] [--config.methods=paper_agentuct,...]
      [--config.min_time=0.5] [--config.step_method=asct_agentuct] [--config.step_batch=8x2]
      [--config.out=results/bench/search.json]
"""
from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import time
from typing import Callable, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from asct_jax import search as S
from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError

CONFIG = "experiments/configs/bench/search.py"
METHODS = ("paper_agentuct", "paper_agentuct_actor", "mctx_muzero", "mctx_gumbel")
OURS = ("paper_agentuct", "paper_agentuct_actor")
NEG = -1e9  # finite "illegal" logit for mctx


def make_env(name: str, policy: str = "uniform"):
    """(env, params, policy_fn) for the benchmark (policy: "uniform" over the legal
    candidates, or "tiny": the freshly initialised tiny decoder of experiments/configs/base.py,
    i.e. what ASCT's search really calls at every node and rollout step)."""
    if name == "toy_tree":
        from asct_jax.envs.toy_tree import ToyTree

        env = ToyTree(num_actions=4, depth=3)
        params = env.make_params(seed=0)
        logits = np.random.default_rng(0).normal(size=(env.num_nodes, env.num_actions))
        return env, params, env.policy_fn(params, logits)
    from asct_jax import envs

    env, params = envs.make(name)
    if policy == "tiny":
        from asct_jax.rl.credit import CreditContext, state_policy_fn
        from asct_jax.rl.build import build_policy
        from asct_jax.rl.sources import TextShape
        from experiments.configs import base

        c = base.get_config()
        shape = TextShape(env.obs_len, env.action_len, env.feedback_len)
        pol, p = build_policy(c, len(env.tokenizer), shape)
        ctx = CreditContext(policy=pol, env=env, env_params=params, group_size=1)
        return env, params, state_policy_fn(ctx, p)

    def uniform_policy(state):
        _, legal = env.legal_actions(state, params)
        n = jnp.maximum(jnp.sum(legal), 1)
        return jnp.where(legal, -jnp.log(n.astype(jnp.float32)), -jnp.inf), jnp.float32(0.0)

    return env, params, uniform_policy


def _mctx_fns(env, params, policy_fn, batch, num_sims, kind):
    import mctx

    def node(states):
        _, legal = jax.vmap(env.legal_actions, in_axes=(0, None))(states, params)
        logp, value = jax.vmap(policy_fn)(states)
        logits = jnp.where(legal, jnp.nan_to_num(logp, neginf=NEG), NEG)
        logits = jnp.where(jnp.any(legal, -1, keepdims=True), logits, 0.0)
        return logits, value.astype(jnp.float32), legal

    def recurrent_fn(p, rng_key, action, states):
        del p, rng_key
        cands, _ = jax.vmap(env.legal_actions, in_axes=(0, None))(states, params)
        act = jnp.take_along_axis(cands, action[:, None, None], axis=1)[:, 0]
        new, ts = jax.vmap(env.step, in_axes=(0, 0, None))(states, act, params)
        logits, value, _ = node(new)
        done = jnp.asarray(ts.done, bool)
        out = mctx.RecurrentFnOutput(
            reward=ts.reward.astype(jnp.float32),
            discount=jnp.where(done, 0.0, 1.0).astype(jnp.float32),
            prior_logits=logits,
            value=jnp.where(done, 0.0, value),
        )
        return out, new

    def run(root_states, key):
        logits, value, legal = node(root_states)
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=root_states)
        kw = dict(num_simulations=num_sims, invalid_actions=~legal, max_depth=env.max_turns)
        if kind == "mctx_muzero":
            out = mctx.muzero_policy(None, key, root, recurrent_fn, **kw)
        else:
            out = mctx.gumbel_muzero_policy(
                None, key, root, recurrent_fn, max_num_considered_actions=env.num_actions, **kw)
        return out.action_weights, out.search_tree.summary().qvalues

    return run


def _ours_fn(env, params, policy_fn, num_sims, kind):
    """The paper's AgentUCT search (rule or pi_old continuations), with an execution cache
    on a staged workflow."""
    from asct_jax.search.methods import paper_rules

    actor = kind.endswith("_actor")
    cfg = S.SearchConfig(num_simulations=num_sims, node_policy=actor)
    rules = paper_rules("agentuct", actor_suffixes=actor)
    cache = S.init_cache(env, params)

    def run(root_states, key):
        out = S.search(env, params, root_states, policy_fn, key, rules, cfg, cache=cache)
        return out.q, out.visits, out.aux_tokens, out.env_calls

    return run


def time_fn(fn: Callable, args, min_time: float, min_reps: int = 3) -> Dict[str, float]:
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*args))  # warm-up
    times: List[float] = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return {"compile_s": compile_s, "step_s": statistics.median(times), "step_s_min": min(times),
            "reps": len(times)}, out


# The paper's ASCT methods: (selection rule, ActorRollout) as asct_jax.search.methods builds them.
STEP_METHODS = {"asct_uniform": ("uniform", False), "asct_uct": ("uct", False),
                "asct_agentuct": ("agentuct", False), "asct_actor_rollout": ("uniform", True)}


def step_share(method: str, num_groups: int, group_size: int, min_time: float,
               min_reps: int = 3) -> Dict[str, float]:
    """Compile and steady-state seconds of a whole training step of `method` on ragspace
    (the quick config of experiments/configs/asct_ragspace.py at num_groups x group_size
    episodes, the tiny decoder) and, at the same batch, of its rollout alone and of its
    credit's search alone (the module docstring)."""
    from asct_jax.rl.credit import state_policy_fn
    from asct_jax.rl.rollout import rollout
    from asct_jax.rl.train_step import make_train_step, policy_params
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from asct_jax.search.methods import ledger_chat, paper_search
    from experiments.configs import asct_ragspace
    from experiments.harness import registry

    if method not in STEP_METHODS:
        raise ValueError(f"step_method: {method!r} is not one of {sorted(STEP_METHODS)}")
    c = asct_ragspace.get_config("quick")
    c.method = method
    c.rollout.num_groups, c.rollout.group_size = num_groups, group_size
    c.ppo.minibatches = 2 if (num_groups * group_size) % 2 == 0 else 1
    m, _ = registry.check(c)
    source = JaxEnvSource(c)
    learner = build_learner(c, m, source)
    env, env_params, ctx = source.env, source.env_params, learner.ctx
    key = learner.key

    # The whole step, its state (the method's cache included) carried as training does.
    t0 = time.perf_counter()
    step = make_train_step(learner, env, env_params).lower(learner.init_state, key).compile()
    step_compile = time.perf_counter() - t0
    state, _ = jax.block_until_ready(step(learner.init_state, key))   # warm-up
    times: List[float] = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t = time.perf_counter()
        state, _ = jax.block_until_ready(step(state, key))
        times.append(time.perf_counter() - t)
    out = {"step_compile_s": step_compile, "step_s": statistics.median(times),
           "step_reps": len(times)}

    # The rollout alone and the search alone, from the state the steps reached.
    params = policy_params(state)
    roll = functools.partial(rollout, learner.policy, env=env, env_params=env_params,
                             num_groups=num_groups, group_size=group_size)
    timing, batch = time_fn(lambda p, k: roll(p, key=k), (params, jax.random.key(5)),
                            min_time, min_reps)
    out.update(rollout_compile_s=timing["compile_s"], rollout_s=timing["step_s"])
    rule, actor_rollout = STEP_METHODS[method]
    ac = learner.method_config
    scfg, rules = paper_search(ac, rule, actor_rollout)
    chat = ledger_chat(ac.actor_token_unit, ctx)      # the actor-scoring ledger's tables
    roots = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch.states)  # B * T

    def search_alone(params, roots, key, cache):
        o = S.search(env, env_params, roots, state_policy_fn(ctx, params), key, rules, scfg,
                     cache=cache, chat=chat)
        return o.q, o.visits, o.cache
    timing, _ = time_fn(search_alone, (params, roots, jax.random.key(6), state.method_state),
                        min_time, min_reps)
    out.update(search_compile_s=timing["compile_s"], search_s=timing["step_s"],
               roots=int(np.prod(batch.turn_mask.shape)), trials=int(ac.trials),
               visited=float(np.mean(np.sum(np.asarray(batch.turn_mask), 1))),
               episodes=num_groups * group_size, method=method)
    out["search_share"] = out["search_s"] / out["step_s"]
    out["search_compile_share"] = out["search_compile_s"] / out["step_compile_s"]
    return out


def main(a):
    """Runs the benchmark of `a` (experiments/configs/bench/search.py)."""
    methods = [m for m in a.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ConfigError("methods", f"unknown {', '.join(bad)}", ", ".join(METHODS))
    batches = [int(x) for x in a.batch_sizes.split(",")]
    sims = [int(x) for x in a.num_simulations.split(",")]

    env, params, policy_fn = make_env(a.env, a.policy)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        def tqdm(x, **_):
            return x

    rows = []
    grid = [(b, n, m) for b in batches for n in sims for m in methods]
    for b, n, m in tqdm(grid, desc="bench_search"):
        keys = jax.random.split(jax.random.PRNGKey(0), b)
        roots, _ = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        if m in OURS:
            fn = _ours_fn(env, params, policy_fn, n, m)
        else:
            fn = _mctx_fns(env, params, policy_fn, b, n, m)
        timing, out = time_fn(fn, (roots, jax.random.PRNGKey(1)), a.min_time)
        row = {"env": a.env, "method": m, "batch": b, "num_simulations": n, **timing,
               "sims_per_s": b * n / timing["step_s"],
               "sims_per_s_best": b * n / timing["step_s_min"]}
        if m in OURS:
            row["aux_tokens_mean"] = float(np.mean(out[2]))
            row["env_calls_mean"] = float(np.mean(out[3]))
        rows.append(row)

    # Ratios: ours vs each mctx policy at the same (B, N).
    ratios = []
    for b in batches:
        for n in sims:
            cell = {r["method"]: r for r in rows if r["batch"] == b and r["num_simulations"] == n}
            for ours in OURS:
                for ref in ("mctx_muzero", "mctx_gumbel"):
                    if ours in cell and ref in cell:
                        ratios.append({"batch": b, "num_simulations": n, "ours": ours, "ref": ref,
                                       "speed_ratio": cell[ours]["sims_per_s"] / cell[ref]["sims_per_s"],
                                       "speed_ratio_best": cell[ours]["sims_per_s_best"]
                                       / cell[ref]["sims_per_s_best"]})
    result = {
        "env": a.env, "policy": a.policy, "num_actions": env.num_actions, "max_turns": env.max_turns,
        "jax": jax.__version__, "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count(),
        "platform": platform.platform(), "rows": rows, "ratios": ratios,
    }
    share = None
    if a.step_method:
        g, k = (int(x) for x in a.step_batch.lower().split("x"))
        share = result["step_share"] = step_share(a.step_method, g, k, a.min_time)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)

    print(f"\nenv={a.env} K={env.num_actions} T={env.max_turns} backend={jax.default_backend()}")
    print(f"| {'method':22s} | {'B':>5s} | {'N':>3s} | {'compile s':>9s} | {'step ms':>9s} "
          f"| {'min ms':>9s} | {'sims/s':>10s} |")
    print("|" + "|".join("-" * w for w in (24, 7, 5, 11, 11, 11, 12)) + "|")
    for r in rows:
        print(f"| {r['method']:22s} | {r['batch']:5d} | {r['num_simulations']:3d} | "
              f"{r['compile_s']:9.2f} | {1e3 * r['step_s']:9.2f} | {1e3 * r['step_s_min']:9.2f} "
              f"| {r['sims_per_s']:10.0f} |")
    for r in ratios:
        print(f"B={r['batch']} N={r['num_simulations']}: {r['ours']} / {r['ref']} = "
              f"{r['speed_ratio']:.2f}x (median), {r['speed_ratio_best']:.2f}x (min)")
    if share is not None:
        sh = share
        print(f"{sh['method']} on ragspace, {sh['episodes']} episodes ({sh['roots']} searched "
              f"roots, {sh['visited']:.1f} visited per episode, {sh['trials']} trials each):")
        print(f"  steady: search {1e3 * sh['search_s']:.1f} ms / step {1e3 * sh['step_s']:.1f} ms"
              f" = {100 * sh['search_share']:.0f}% of the step (rollout "
              f"{1e3 * sh['rollout_s']:.1f} ms = {100 * sh['rollout_s'] / sh['step_s']:.0f}%)")
        print(f"  compile: search {sh['search_compile_s']:.1f} s / step "
              f"{sh['step_compile_s']:.1f} s = {100 * sh['search_compile_share']:.0f}% (rollout "
              f"{sh['rollout_compile_s']:.1f} s)")
    print(f"wrote {a.out}")
    return result


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
