"""The train_pass mode of experiments.bench.model (its docstring describes it): forward +
backward tokens/s of our decoder (float32, bfloat16, the policy's constrained scoring pass)
against transformers' PyTorch model (float32, bfloat16), beside the machine's matmuls; and
the policy inputs both the scoring and the training pass time.
"""
from __future__ import annotations

import os
import resource
import statistics
import time

import jax
import numpy as np
import torch


def policy_inputs(ours, graphdef, n, k, a, o):
    """(Policy over `graphdef`, obs [N, O], cands [N, K, A] with shared prefixes, legal [N, K])."""
    import jax.numpy as jnp
    from asct_jax.rl.policy import Policy
    v = ours.config.vocab_size
    rng = np.random.default_rng(1)
    obs = jnp.asarray(rng.integers(5, v, (n, o)), jnp.int32)
    cands = jnp.asarray(rng.integers(5, 9, (n, k, a)), jnp.int32)   # shared prefixes
    return Policy(graphdef, v, o, a, 0), obs, cands, jnp.ones((n, k), bool)


def lm_loss(model, ids):
    """Mean next-token cross-entropy of the LM logits [B, S - 1, V] (float32)."""
    import jax.numpy as jnp
    logp = jax.nn.log_softmax(model(ids)[:, :-1], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1))


def compile_apart(fn, *args):
    """(jax.jit(fn) compiled for args, lower + compile seconds, XLA's flop estimate of the
    layers unrolled: experiments.bench.train.unrolled_flops)."""
    from experiments.bench.train import unrolled_flops
    flops = unrolled_flops(fn, *args)
    t = time.perf_counter()
    exe = jax.jit(fn).lower(*args).compile()
    return exe, time.perf_counter() - t, flops


def global_norm(arrays) -> float:
    return float(np.sqrt(sum(float(np.sum(np.square(np.asarray(g, np.float32)))) for g in arrays)))


def matmul_passes(n=2048):
    """[n, n] x [n, n] matmuls (float32 and bfloat16, jitted jnp.dot and torch.mm) as timed passes."""
    import jax.numpy as jnp
    passes, dot = [], jax.jit(jnp.dot)
    for dtype in ("float32", "bfloat16"):
        x, tx = jnp.ones((n, n), dtype), torch.ones(n, n, dtype=getattr(torch, dtype))
        for impl, fn in (("jax", lambda x=x: dot(x, x).block_until_ready()), ("torch", lambda x=tx: torch.mm(x, x))):
            passes.append(dict(op="matmul", impl=impl if dtype == "float32" else impl + "_bf16", step=fn,
                               tokens=0, flop=2.0 * n ** 3, shape=dict(m=n, k=n, n=n)))
    return passes


def bench_train_pass(name, ours, ref, ours_bf16, args):
    """Forward + backward tokens/s: ours (float32, bfloat16, policy scoring) vs torch (float32,
    bfloat16), and the [2048]^3 matmuls. After one first call each, the passes are timed in
    `repeats` interleaved rounds, so that every one sees the same machine load (torch's
    bfloat16 passes in rounds of their own, last; see the module docstring)."""
    import copy
    import jax.numpy as jnp
    from flax import nnx
    b, s = args.train_shape
    v, h = ours.config.vocab_size, ours.config.hidden_size
    n_params = sum(p.numel() for p in ref.parameters())   # the tied embedding once
    ids = np.random.default_rng(2).integers(3, v, (b, s)).astype(np.int32)
    lm = dict(op="train_pass", tokens=b * s, flop=6.0 * n_params * b * s, shape=dict(batch=b, seq=s, v=v))
    passes = []   # dict(op, impl, step, check -> (loss, grad norm), tokens, flop, ...)

    def add_jax(impl, loss_fn, params, *inputs, **info):
        exe, compile_s, xla_flop = compile_apart(jax.value_and_grad(loss_fn), params, *inputs)

        def check():
            loss, grads = exe(params, *inputs)
            return float(loss), global_norm(jax.tree.leaves(grads))
        passes.append(dict(impl=impl, step=lambda: jax.block_until_ready(exe(params, *inputs)), check=check,
                           compile_s=compile_s, xla_gflop=xla_flop / 1e9, **info))

    for impl, model in (("jax", ours), ("jax_bf16", ours_bf16)):
        if model is not None:
            graphdef, params = nnx.split(model)
            add_jax(impl, lambda p, x, g=graphdef: lm_loss(nnx.merge(g, p), x), params, jnp.asarray(ids), **lm)
    n, o, a, k = args.policy_shape
    graphdef, params = nnx.split(ours)
    policy, obs, cands, legal = policy_inputs(ours, graphdef, n, k, a, o)
    add_jax("jax", lambda p: jnp.sum(policy.action_log_probs(p, obs, cands[:, 0], cands, legal)[0]), params,
            op="policy_train_pass", tokens=n * (o + a), flop=6.0 * (n_params - v * h) * n * (o + a),
            shape=dict(n=n, o=o, a=a, k=k, v=v))

    x = torch.as_tensor(ids, dtype=torch.long)

    def torch_step(model):
        model.zero_grad(set_to_none=True)
        logits = model(x).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v), x[:, 1:].reshape(-1))
        loss.backward()
        return loss

    def torch_check(model):
        loss = torch_step(model).item()
        return loss, global_norm(p.grad.float() for p in model.parameters() if p.grad is not None)

    if not args.no_torch:
        models_torch = [("torch", ref)]
        if ours_bf16 is not None:
            models_torch.append(("torch_bf16", copy.deepcopy(ref).to(torch.bfloat16)))
        for impl, model in models_torch:
            passes.append(dict(impl=impl, step=lambda m=model: torch_step(m), check=lambda m=model: torch_check(m),
                               compile_s=None, xla_gflop=None, torch_threads=torch.get_num_threads(), **lm))

    passes += matmul_passes()
    # torch's bfloat16 passes (oneDNN on AMX) last: once they have run, our passes in the
    # same process spend seconds more in the kernel (system time) each.
    for late in (False, True):
        group = [p for p in passes if p["impl"].startswith("torch_bf16") == late]
        for p in group:
            p["times"], p["sys"] = [], []
            p["step"]()
        for _ in range(args.repeats):
            for p in group:
                sys_t, t = resource.getrusage(resource.RUSAGE_SELF).ru_stime, time.perf_counter()
                p["step"]()
                p["times"].append(time.perf_counter() - t)
                p["sys"].append(resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys_t)
    rows = []
    for p in passes:
        times = p.pop("times")
        steady = statistics.median(times)
        loss, grad_norm = p.pop("check", lambda: (None, None))()
        del p["step"]
        rows.append(dict(model=name, **p, steady_s=steady, best_s=min(times), times_s=times,
                         system_s=statistics.median(p.pop("sys")),
                         tokens_per_s=p["tokens"] / steady, gflop_per_s=p["flop"] / steady / 1e9,
                         loss=loss, grad_norm=grad_norm, load_1min=os.getloadavg()[0]))
    matmul = next(r for r in rows if r["op"] == "matmul" and r["impl"] == "jax")["gflop_per_s"]
    for r in rows:
        r["vs_jax_matmul"] = r["gflop_per_s"] / matmul
        comp = f"{r['compile_s']:.1f}s" if r.get("compile_s") is not None else "-"
        head = f"{name:14s} {r['op']:17s} {r['impl']:10s} "
        if r["op"] == "matmul":
            print(head + f"[2048]^3 {r['steady_s'] * 1e3:8.1f} ms {r['gflop_per_s']:6.1f} GFLOP/s  "
                  f"(best {r['flop'] / r['best_s'] / 1e9:6.1f})", flush=True)
            continue
        print(head + f"{r['tokens_per_s']:7.1f} tok/s  steady {r['steady_s'] * 1e3:8.1f} ms (best "
              f"{r['best_s'] * 1e3:8.1f})  {r['gflop_per_s']:6.1f} GFLOP/s ({r['vs_jax_matmul']:4.0%} of jax matmul)  "
              f"compile {comp}  system {r['system_s']:.2f}s  loss {r['loss']:.4f} |g| {r['grad_norm']:.4f}  "
              f"load {r['load_1min']:.2f}", flush=True)
    by = {(r["op"], r["impl"]): r for r in rows}
    for ours_impl, torch_impl in (("jax", "torch"), ("jax_bf16", "torch_bf16"), ("jax_bf16", "torch")):
        if ("train_pass", ours_impl) in by and ("train_pass", torch_impl) in by:
            o, t = by["train_pass", ours_impl], by["train_pass", torch_impl]
            o[f"speed_vs_{torch_impl}"] = statistics.median(tt / to for to, tt in zip(o["times_s"], t["times_s"]))
            print(f"{name:14s} train_pass speed {ours_impl} / {torch_impl}: {o[f'speed_vs_{torch_impl}']:.2f}x "
                  f"(median of the rounds' ratios; of the medians {t['steady_s'] / o['steady_s']:.2f}x, "
                  f"of the best {t['best_s'] / o['best_s']:.2f}x)", flush=True)
    ref.zero_grad(set_to_none=True)
    return rows
