"""Train-step cost per credit method at the same batch, split into rollout, credit and update.

    python -m experiments.bench_train [--env rag_workflow] [--methods grpo,factor] [--repeats 3]

Each piece is jitted on its own: rollout(params, key), credit(params, batch, key, step) and
learn(state, batch, key) (= credit + PPO update, so update = learn - credit). Compile time
(first call) is reported apart from the steady state (median of --repeats calls). The
compiled train step fuses the three; its time is reported too. Prints a Markdown table
and writes JSON (default results/bench/train.json).
"""
import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from asct_jax.rl.rollout import rollout
from asct_jax.infra.run_logger import atomic_write_json
from asct_jax.infra.tables import markdown_table
from asct_jax.rl.train_step import make_train_step
from asct_jax.rl.trainer import JaxEnvSource, build_learner
from experiments import registry
from experiments.configs import base

DEFAULT_METHODS = ("ppo_return", "ppo_gae", "grpo", "vineppo", "asct_uniform", "asct_uct",
                   "asct_agentuct", "factor", "serl")


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


def bench_method(method, env_name, repeats, num_groups, group_size):
    c = base.get_config()
    c.method, c.env.name = method, env_name
    c.rollout.num_groups, c.rollout.group_size = num_groups, group_size
    source = JaxEnvSource(c)
    exp = build_learner(c, registry.get(method), source)
    state, key = exp.init_state, exp.key
    roll = jax.jit(lambda p, k: rollout(exp.policy, p, source.env, source.env_params, k,
                                        num_groups, group_size))
    batch, roll_c, roll_s = timed(roll, state.params, key, repeats=repeats)
    credit = jax.jit(exp.credit_fn)
    _, cred_c, cred_s = timed(credit, state.params, batch, key, jnp.int32(0), repeats=repeats)
    learn = exp.learn_step()
    _, learn_c, learn_s = timed(learn, state, batch, key, repeats=repeats)
    step_fn = make_train_step(c, exp.policy, source.env, source.env_params, exp.credit_fn,
                              exp.optimizer, exp.mesh)
    step = lambda s, k: step_fn(jax.tree.map(jnp.copy, s), k)  # noqa: E731 (donation)
    _, step_c, step_s = timed(step, state, key, repeats=repeats)
    return {"method": method, "rollout_s": roll_s, "credit_s": cred_s,
            "update_s": max(learn_s - cred_s, 0.0), "train_step_s": step_s,
            "compile_rollout_s": roll_c, "compile_credit_s": cred_c,
            "compile_learn_s": learn_c, "compile_step_s": step_c}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="rag_workflow")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--out", default="results/bench/train.json")
    args = ap.parse_args(argv)
    rows = [bench_method(m, args.env, args.repeats, args.num_groups, args.group_size)
            for m in args.methods.split(",")]
    ref = next((r["train_step_s"] for r in rows if r["method"] in ("grpo", "ppo_return")),
               rows[0]["train_step_s"])
    for r in rows:
        r["step_vs_baseline"] = r["train_step_s"] / ref
    cols = ["method", "rollout_s", "credit_s", "update_s", "train_step_s", "step_vs_baseline",
            "compile_step_s"]
    print(markdown_table([{k: (f"{r[k]:.3f}" if isinstance(r[k], float) else r[k])
                           for k in cols} for r in rows], cols))
    atomic_write_json(args.out, {"env": args.env, "batch": args.num_groups * args.group_size,
                                 "devices": jax.device_count(), "rows": rows})


if __name__ == "__main__":
    main()
