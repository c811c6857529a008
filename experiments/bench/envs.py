"""Benchmark of the JAX-native environments (small configs).

For each environment: scripted expert and uniform random success / score / episode length
over N episodes (one jit: asct_jax.envs.play's lax.scan over max_turns of the vmapped
batch), and environment steps per second at batch 1 and batch 1024 (the same jitted
rollout with the random policy: legal_actions + policy + step per step; steady state,
compile time reported apart). Prints a Markdown table and writes JSON.

    python -m experiments.bench.envs [--config.episodes=1024] [--config.out=results/bench/envs.json]
"""
from __future__ import annotations

import json
import os
import platform
import time

import jax
import numpy as np

from asct_jax.envs import ENVS as ALL_ENVS, make, module_of
from asct_jax.envs.evaluate import rollout
from asct_jax.infra import config_cli

CONFIG = "experiments/configs/bench/envs.py"

ENVS = tuple(e for e in ALL_ENVS if e != "toy_tree")     # the text environments


def _timed(fn, *args, repeats: int):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return compile_s, (time.perf_counter() - t0) / repeats


def bench_env(name: str, episodes: int, size: str = "small") -> dict:
    env, params = make(name, size=size)
    mod = module_of(name)
    row = {"env": name, "size": size, "K": env.num_actions, "A": env.action_len,
           "O": env.obs_len, "F": env.feedback_len, "T": env.max_turns}
    policies = {"expert": mod.expert_policy, "random": mod.random_policy}
    if hasattr(mod, "greedy_policy"):
        policies["greedy"] = mod.greedy_policy
    for pname, pol in policies.items():
        f = jax.jit(lambda k, pol=pol: rollout(env, params, pol, k, episodes))
        out = jax.device_get(f(jax.random.PRNGKey(0)))
        row[f"{pname}_success"] = float(np.mean(out["success"]))
        row[f"{pname}_score"] = float(np.mean(out["score"]))
        row[f"{pname}_len"] = float(np.mean(out["length"]))
        if "f1" in out:
            row[f"{pname}_f1"] = float(np.mean(out["f1"]))
            row[f"{pname}_exec_cost"] = float(np.mean(out["exec_cost"]))
    for batch in (1, 1024):
        f = jax.jit(lambda k, b=batch: rollout(env, params, mod.random_policy, k, b))
        c, t = _timed(f, jax.random.PRNGKey(1), repeats=20 if batch == 1 else 5)
        row[f"compile_s_b{batch}"] = c
        row[f"steps_per_s_b{batch}"] = batch * env.max_turns / t
    return row


def markdown(rows) -> str:
    head = ("| env | K/A/O/F/T | expert success | expert score | random success | random score "
            "| expert len | random len | steps/s b=1 | steps/s b=1024 | compile s (b=1/b=1024) |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['K']}/{r['A']}/{r['O']}/{r['F']}/{r['T']} "
            f"| {r['expert_success']:.3f} | {r['expert_score']:.3f} | {r['random_success']:.3f} "
            f"| {r['random_score']:.3f} | {r['expert_len']:.2f} | {r['random_len']:.2f} "
            f"| {r['steps_per_s_b1']:,.0f} | {r['steps_per_s_b1024']:,.0f} "
            f"| {r['compile_s_b1']:.1f}/{r['compile_s_b1024']:.1f} |")
    return "\n".join(lines)


def main(args):
    """Runs the benchmark of `args` (experiments/configs/bench/envs.py)."""
    rows = []
    for name in args.envs.split(","):
        rows.append(bench_env(name, args.episodes, args.size))
        print(f"done {name}", flush=True)
    table = markdown(rows)
    print(table)
    for r in rows:
        if "greedy_score" in r:
            print(f"\n{r['env']}: cheap greedy workflow utility {r['greedy_score']:.3f} "
                  f"(f1 {r['greedy_f1']:.3f}, tokens {r['greedy_exec_cost']:.0f}) vs expert "
                  f"{r['expert_score']:.3f} (f1 {r['expert_f1']:.3f}, tokens "
                  f"{r['expert_exec_cost']:.0f}), random {r['random_score']:.3f}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    meta = {"jax": jax.__version__, "backend": jax.default_backend(),
            "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "episodes": args.episodes, "size": args.size}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows, "markdown": table}, f, indent=2)
    print(f"saved {args.out}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
