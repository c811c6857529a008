"""Train-step cost per credit method at the same batch, split into rollout, credit and update.

    python -m experiments.bench.train [--config.env=rag_workflow] [--config.methods=grpo,factor] \
        [--config.repeats=3]

Each piece is jitted on its own: rollout(params, key), credit(params, batch, key, step) and
learn(state, batch, key) (= credit + PPO update, so update = learn - credit). Compile time
(first call) is reported apart from the steady state (median of `repeats` calls). The
compiled train step fuses the three; its time is reported too. Prints a Markdown table
and writes JSON (default results/bench/train.json). Budget: each step's environment calls
(rollout + the credit's own) as a ratio to the baseline (GRPO), and the wall clock per
environment call beside the baseline's.

FLOP/s: XLA's cost analysis of the compiled update (learn minus credit, traced with the
decoder's layers unrolled; it counts a loop body once, so times the optimiser updates)
over its steady-state time, printed beside the machine's matmul FLOP/s measured in the
same process (jitted f32 jnp.dot [1024, 576] x [576, 1536], and [4096, H] x [H, I] at the
policy's MLP width). The 1-minute load average is printed with every row: on a shared
machine compare the rows of one run.
"""
import os
import statistics
import time

import jax
import jax.numpy as jnp

from asct_jax.infra import config_cli
from asct_jax.rl.rollout import rollout
from asct_jax.infra.run_logger import atomic_write_json
from asct_jax.infra.tables import markdown_table
from asct_jax.rl.train_step import make_learn_step, make_train_step
from asct_jax.rl.build import build_learner
from asct_jax.rl.sources import JaxEnvSource
from experiments.configs import base
from experiments.harness import registry
from experiments.harness.dotted import apply_overrides

CONFIG = "experiments/configs/bench/train.py"
DEFAULT_METHODS = ("ppo_return", "ppo_gae", "grpo", "vineppo", "asct_uniform", "asct_uct",
                   "asct_agentuct", "factor", "serl", "gigpo")


def timed(fn, *args, repeats):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return out, compile_s, statistics.median(times)


def unrolled_flops(fn, *args) -> float:
    """XLA's flop estimate of jax.jit(fn)(*args) traced with the decoder's layers unrolled
    (`decoder.SCAN_LAYERS = False`): XLA's cost analysis counts a loop body once, so the
    scanned layers would count as one. The lowered program's analysis (no compile); jit's
    caches are cleared around it."""
    from asct_jax.models import decoder
    decoder.SCAN_LAYERS = False
    jax.clear_caches()
    try:
        ca = jax.jit(fn).lower(*args).cost_analysis()
    finally:
        decoder.SCAN_LAYERS = True
        jax.clear_caches()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    return float((ca or {}).get("flops", float("nan")))


def matmul_flops_per_s(m=1024, k=576, n=1536, repeats=10, dtype=jnp.float32):
    """Measured matmul FLOP/s of a jitted jnp.dot [m, k] x [k, n] in `dtype` (median)."""
    x = jnp.ones((m, k), dtype)
    w = jnp.ones((k, n), dtype)
    _, _, s = timed(jax.jit(jnp.dot), x, w, repeats=repeats)
    return 2.0 * m * k * n / s


def compiled_memory(compiled):
    """XLA's memory analysis of a compiled program, in bytes: arguments, outputs, temporaries
    and their sum less the donated (aliased) bytes, the program's peak; {} if unavailable."""
    ma = compiled.memory_analysis()
    if ma is None:
        return {}
    out = {k: int(getattr(ma, f"{k}_size_in_bytes")) for k in ("argument", "output", "temp",
                                                              "alias")}
    out["peak"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return out


def lower_train_step(learner, source):
    """The compiled train step of a learner, lowered for its initial state (not compiled)."""
    step_fn = make_train_step(learner, source.env, source.env_params)
    return step_fn.lower(learner.init_state, learner.key)


def timed_compile(lowered):
    """(compiled program, compile seconds) of a lowered one."""
    t = time.perf_counter()
    compiled = lowered.compile()
    return compiled, time.perf_counter() - t


def time_compiled_step(compiled, learner, repeats):
    """((state, metrics), steady s, compiled_memory) of a compiled train step on the
    learner's initial state (a copy each call: the step donates its state)."""
    step = lambda s, k: compiled(jax.tree.map(jnp.copy, s), k)  # noqa: E731 (donation)
    out, _, steady_s = timed(step, learner.init_state, learner.key, repeats=repeats)
    return out, steady_s, compiled_memory(compiled)


def time_train_step(learner, source, repeats):
    """((state, metrics), lower + compile s, steady s, compiled_memory) of the compiled
    train step on the learner's initial state."""
    t = time.perf_counter()
    compiled, _ = timed_compile(lower_train_step(learner, source))
    compile_s = time.perf_counter() - t
    out, steady_s, memory = time_compiled_step(compiled, learner, repeats)
    return out, compile_s, steady_s, memory


def bench_method(method, env_name, repeats, num_groups, group_size, chooser="candidates",
                 continuations="chooser"):
    c = base.get_config()
    c.method, c.env.name = method, env_name
    c.actor.chooser, c.actor.continuations = chooser, continuations
    c.rollout.num_groups, c.rollout.group_size = num_groups, group_size
    source = JaxEnvSource(c)
    exp = build_learner(c, registry.get(method), source)
    state, key = exp.init_state, exp.key
    roll = jax.jit(lambda p, k: rollout(exp.policy, p, source.env, source.env_params, k,
                                        num_groups, group_size))
    batch, roll_c, roll_s = timed(roll, state.params, key, repeats=repeats)
    credit = jax.jit(exp.credit_fn)
    mstate = state.method_state
    _, cred_c, cred_s = timed(credit, state.params, batch, key, jnp.int32(0), mstate,
                              repeats=repeats)
    learn = make_learn_step(exp)
    _, learn_c, learn_s = timed(learn, state, batch, key, repeats=repeats)
    (_, m), step_c, step_s, _ = time_train_step(exp, source, repeats)
    # Environment calls of one step: the rollout's plus the credit's own (search,
    # continuations, VinePPO rollouts).
    env_calls = float(m["rollout/env_calls"]) + float(m["credit/env_calls"])
    update_s = max(learn_s - cred_s, 0.0)
    loops = float(m["train/updates"])    # the protocol's optimiser updates of this step
    update_flops = max(unrolled_flops(learn, state, batch, key)
                       - unrolled_flops(credit, state.params, batch, key, jnp.int32(0), mstate),
                       0.0) * loops
    n_params = sum(x.size for x in jax.tree.leaves(state.params))
    return {"method": method, "rollout_s": roll_s, "credit_s": cred_s,
            "update_s": update_s, "train_step_s": step_s,
            "update_gflop": update_flops / 1e9,
            "update_gflop_per_s": update_flops / 1e9 / update_s if update_s else float("nan"),
            "params": n_params, "load_1min": os.getloadavg()[0],
            "env_calls": env_calls, "s_per_env_call": step_s / max(env_calls, 1.0),
            "compile_rollout_s": roll_c, "compile_credit_s": cred_c,
            "compile_learn_s": learn_c, "compile_step_s": step_c}


def bench_seeds(method, env_name, counts, repeats, num_groups, group_size):
    """[{seeds, compile_s, step_s, step_vs_one}]: the wall of one training step of S
    seeds trained as one program (trainer.seed_batch + make_seeds_train_step, the tables'
    path) for each S in `counts`, beside S = 1 in the same process."""
    from asct_jax.rl.trainer import seed_batch
    from asct_jax.rl.train_step import SEED_AXIS, make_seeds_train_step

    rows = []
    for n in counts:
        c = base.get_config()
        c.method, c.env.name = method, env_name
        c.rollout.num_groups, c.rollout.group_size = num_groups, group_size
        source = JaxEnvSource(c)
        learners = []
        for i in range(n):
            ci = apply_overrides(c, {"seed": 100 + i})
            learners.append(build_learner(ci, registry.get(method), source,
                                          seed_axis=SEED_AXIS))
        state, sharding, keys = seed_batch(learners, [lr.init_state for lr in learners])
        step = make_seeds_train_step(learners[0], source.env, source.env_params, sharding)
        run = lambda s, k: step(jax.tree.map(jnp.copy, s), k)  # noqa: E731 (donation)
        _, compile_s, step_s = timed(run, state, keys, repeats=repeats)
        rows.append({"seeds": n, "compile_s": compile_s, "step_s": step_s})
        print(f"{method} {env_name}: {n} seeds in one program: step {step_s:.3f}s "
              f"(compile {compile_s:.1f}s)", flush=True)
    one = rows[0]["step_s"]
    for r in rows:
        r["step_vs_one"] = r["step_s"] / one
    return rows


def main(args):
    """Runs the benchmark of `args` (experiments/configs/bench/train.py)."""
    if args.seeds:
        counts = [int(x) for x in args.seeds.split(",")]
        rows = bench_seeds(args.methods.split(",")[0], args.env, counts, args.repeats,
                           args.num_groups, args.group_size)
        cols = ["seeds", "compile_s", "step_s", "step_vs_one"]
        print(markdown_table([{k: (f"{r[k]:.3f}" if isinstance(r[k], float) else r[k])
                               for k in cols} for r in rows], cols))
        atomic_write_json(args.out, {"env": args.env, "method": args.methods.split(",")[0],
                                     "batch": args.num_groups * args.group_size,
                                     "seeds": rows})
        return
    mm = matmul_flops_per_s() / 1e9
    c = base.get_config()
    mlp = matmul_flops_per_s(4096, c.model.hidden_size,
                             c.model.intermediate_size) / 1e9
    print(f"matmul f32 [1024,576]x[576,1536]: {mm:.1f} GFLOP/s; at the policy's MLP shape: "
          f"{mlp:.1f} GFLOP/s (load {os.getloadavg()[0]:.2f})", flush=True)
    rows = []
    for m in args.methods.split(","):
        rows.append(bench_method(m, args.env, args.repeats, args.num_groups, args.group_size,
                                 args.chooser, args.continuations))
        r = rows[-1]
        print(f"{m}: rollout {r['rollout_s']:.3f}s credit {r['credit_s']:.3f}s update "
              f"{r['update_s']:.3f}s step {r['train_step_s']:.3f}s "
              f"(load {r['load_1min']:.2f})", flush=True)
    base_row = next((r for r in rows if r["method"] in ("grpo", "ppo_return")), rows[0])
    for r in rows:
        r["step_vs_baseline"] = r["train_step_s"] / base_row["train_step_s"]
        r["update_vs_matmul"] = r["update_gflop_per_s"] / mm
        # FACTOR's budget (the paper: about 3.5x GRPO's environment calls) and its wall
        # clock per environment call, at most GRPO's when the continuations are batched.
        r["env_calls_vs_baseline"] = r["env_calls"] / max(base_row["env_calls"], 1.0)
        r["s_per_env_call_vs_baseline"] = r["s_per_env_call"] / base_row["s_per_env_call"]
    cols = ["method", "rollout_s", "credit_s", "update_s", "train_step_s", "step_vs_baseline",
            "env_calls", "env_calls_vs_baseline", "s_per_env_call",
            "s_per_env_call_vs_baseline", "update_gflop", "update_gflop_per_s",
            "update_vs_matmul", "load_1min", "compile_step_s"]
    print(markdown_table([{k: (f"{r[k]:.3f}" if isinstance(r[k], float) else r[k])
                           for k in cols} for r in rows], cols))
    print(f"matmul f32: {mm:.1f} GFLOP/s ([1024,576]x[576,1536]), {mlp:.1f} GFLOP/s "
          f"(policy MLP shape)")
    atomic_write_json(args.out, {"env": args.env, "chooser": args.chooser,
                                 "batch": args.num_groups * args.group_size,
                                 "devices": jax.device_count(), "matmul_gflop_per_s": mm,
                                 "matmul_mlp_shape_gflop_per_s": mlp, "rows": rows})


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
