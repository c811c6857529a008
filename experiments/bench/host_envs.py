"""Benchmark of host environments in worker processes (ParallelHostEnv vs BatchedHostEnv).

For the serial BatchedHostEnv (the reference) and ParallelHostEnv on each worker count W:
N ScienceWorld environments play `turns` turns from reset(seeds 0..N-1), a turn being
legal_actions + step with a uniformly random legal command (numpy generator seeded with
`seed`, so every configuration plays the same games and commands). Reported apart:
start-up (building the batch, spawning the workers, the first reset: the JVM launches and
task loads) and the steady state (a second reset, then the turns), with its time split
into reset / legal_actions / step. Environment-turns per second = turns of running games
/ (legal_actions + step seconds). Prints a Markdown table and writes JSON atomically.

    python -m experiments.bench.host_envs --config.task=find-non-living-thing --config.envs=4 \
        --config.turns=20 --config.workers=1,2,4 --config.out=results/bench/host_envs.json
"""
from __future__ import annotations

import functools
import json
import os
import platform
import time

import numpy as np

from asct_jax.envs.external import BatchedHostEnv, ParallelHostEnv, ScienceWorldEnv
from asct_jax.infra import config_cli
from asct_jax.infra.run_logger import atomic_write_text

CONFIG = "experiments/configs/bench/host_envs.py"


def bench(make_batch, num_envs: int, turns: int, seed: int) -> dict:
    """Times one configuration; make_batch() -> a batch of num_envs environments."""
    seeds = list(range(num_envs))
    t0 = time.perf_counter()
    env = make_batch()
    env.reset(seeds)
    startup_s = time.perf_counter() - t0
    try:
        rng = np.random.default_rng(seed)
        t = {"reset": 0.0, "legal_actions": 0.0, "step": 0.0}
        t0 = time.perf_counter()
        states, _ = env.reset(seeds)
        t["reset"] = time.perf_counter() - t0
        live_turns = 0
        for _ in range(turns):
            live = [not s.done for s in states]
            if not any(live):
                break
            t0 = time.perf_counter()
            legal = env.legal_actions(states)
            t["legal_actions"] += time.perf_counter() - t0
            actions = [c[int(rng.integers(len(c)))] if c else "look" for c in legal]
            t0 = time.perf_counter()
            states, _ = env.step(states, actions)
            t["step"] += time.perf_counter() - t0
            live_turns += sum(live)
    finally:
        env.close()
    total = sum(t.values())
    return {"startup_s": startup_s, **{f"{k}_s": v for k, v in t.items()},
            "env_turns": live_turns,
            "turns_per_s": live_turns / (t["legal_actions"] + t["step"]),
            **{f"share_{k}": v / total for k, v in t.items()},
            "final": [(s.turn, s.score, s.observation) for s in states]}


def markdown(rows) -> str:
    lines = ["| configuration | start-up s | env-turns/s | speed-up | reset / legal / step "
             "share | reset s | legal s | step s |", "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['startup_s']:.1f} | {r['turns_per_s']:.1f} "
            f"| {r['speedup']:.2f} | {r['share_reset']:.2f} / {r['share_legal_actions']:.2f} / "
            f"{r['share_step']:.2f} | {r['reset_s']:.2f} | {r['legal_actions_s']:.2f} "
            f"| {r['step_s']:.2f} |")
    return "\n".join(lines)


def main(args):
    """Runs the benchmark of `args` (experiments/configs/bench/host_envs.py)."""
    load_before = os.getloadavg()[0]
    make_env = functools.partial(ScienceWorldEnv, task=args.task, max_turns=args.turns)
    configs = [("serial", lambda: BatchedHostEnv([make_env() for _ in range(args.envs)]))]
    configs += [(f"{w} worker{'s' * (w > 1)}",
                 lambda w=w: ParallelHostEnv(make_env, args.envs, w))
                for w in (int(x) for x in args.workers.split(","))]
    rows = []
    for name, make_batch in configs:
        rows.append({"config": name, **bench(make_batch, args.envs, args.turns, args.seed)})
        print(f"done {name}: {rows[-1]['turns_per_s']:.1f} env-turns/s", flush=True)
    reference = rows[0]["final"]
    for r in rows:
        r["speedup"] = r["turns_per_s"] / rows[0]["turns_per_s"]
        r["same_games_as_serial"] = r.pop("final") == reference
    table = markdown(rows)
    print(table)
    print("final turns, scores and observations equal the serial run's: "
          f"{all(r['same_games_as_serial'] for r in rows)}")
    meta = {"task": args.task, "envs": args.envs, "turns": args.turns, "seed": args.seed,
            "cpu_count": os.cpu_count(), "load_avg_1m_before": load_before,
            "load_avg_1m_after": os.getloadavg()[0],
            "platform": platform.platform()}
    atomic_write_text(args.out, json.dumps({"meta": meta, "rows": rows, "markdown": table},
                                           indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
