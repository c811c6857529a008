"""Benchmark of the training step's compilation on XLA:CPU: compile time apart from steady
state, per XLA flag variant, side by side with the default.

For each method and each flag variant (one fresh process each: XLA_FLAGS are read when the
backend starts; the persistent compilation cache off), the seed-batched train step of the
FACTOR table's `smoke_warm` config on `shop` (2 seeds, what `experiments.reproduce --quick`
compiles) is lowered, compiled and run: lower s, compile s, the first call, the steady
state (mean of 3 calls) and a checksum of the parameters after the 4 calls (float64 sum;
equal to the default's means the flags left the numbers alone). Prints a Markdown table
with each variant's compile and step time as a ratio of the default's; writes JSON
atomically.

    python -m experiments.bench_compile --methods grpo,factor \
        --out results/bench/compile.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

VARIANTS = {
    "default": "",
    "O1": "--xla_backend_optimization_level=1",
    "O0": "--xla_backend_optimization_level=0",
    "no_thunk_runtime": "--xla_cpu_use_thunk_runtime=false",
    "no_fusion_emitters": "--xla_cpu_use_fusion_emitters=false",
}


def measure(method: str) -> dict:
    """Times one method's step in this process (XLA_FLAGS as the process started)."""
    import jax
    import numpy as np

    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from asct_jax.rl.trainer import seed_batch
    from asct_jax.rl.train_step import SEED_AXIS, make_seeds_train_step
    from experiments import registry
    from experiments.configs import factor_table
    from experiments.runner import check_variant

    base = factor_table.get_config("smoke_warm")
    configs = [check_variant(base, {"method": method, "env.name": "shop", "seed": s})
               for s in (42, 43)]
    source = JaxEnvSource(configs[0])
    learners = [build_learner(c, registry.get(method), source, seed_axis=SEED_AXIS)
                for c in configs]
    state, sharding, keys = seed_batch(learners, [l.init_state for l in learners])
    step = make_seeds_train_step(learners[0], source.env, source.env_params, sharding)
    t0 = time.perf_counter()
    lowered = step.lower(state, keys)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    state, m = compiled(state, keys)
    jax.block_until_ready(m)
    t3 = time.perf_counter()
    for _ in range(3):
        state, m = compiled(state, keys)
        jax.block_until_ready(m)
    t4 = time.perf_counter()
    leaves = [np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(state.params)]
    return {"method": method, "lower_s": t1 - t0, "compile_s": t2 - t1, "first_s": t3 - t2,
            "steady_s": (t4 - t3) / 3, "checksum": float(np.concatenate(leaves).sum())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="grpo")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--out", default="results/bench/compile.json")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:   # one measurement, in the process the parent started with the flags
        print(json.dumps(measure(a.child)))
        return
    variants = a.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        sys.exit(f"--variants: unknown {', '.join(bad)}; allowed: {', '.join(VARIANTS)}")
    rows = []
    for method in a.methods.split(","):
        for v in variants:
            env = dict(os.environ, XLA_FLAGS=VARIANTS[v], JAX_PLATFORMS="cpu",
                       JAX_ENABLE_COMPILATION_CACHE="false")
            p = subprocess.run([sys.executable, "-m", "experiments.bench_compile",
                                "--child", method], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"{method} / {v} failed:\n{p.stderr[-2000:]}")
            rows.append(dict(json.loads(p.stdout.strip().splitlines()[-1]), variant=v,
                             flags=VARIANTS[v]))
    lines = ["| method | variant | lower s | compile s | compile / default | steady s/step | "
             "step / default | same numbers |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = next((x for x in rows if x["method"] == r["method"] and x["variant"] == "default"),
                 r)
        lines.append(f"| {r['method']} | {r['variant']} | {r['lower_s']:.1f} | "
                     f"{r['compile_s']:.1f} | {r['compile_s'] / d['compile_s']:.2f} | "
                     f"{r['steady_s']:.2f} | {r['steady_s'] / d['steady_s']:.2f} | "
                     f"{'yes' if r['checksum'] == d['checksum'] else 'no'} |")
    print("\n".join(lines))
    from asct_jax.infra.run_logger import atomic_write_json
    atomic_write_json(a.out, {"rows": rows, "machine": platform.processor() or
                              platform.machine(), "cpus": os.cpu_count()})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
