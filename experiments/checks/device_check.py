"""One command that measures what this machine's accelerator does with our code.

    python -m experiments.checks.device_check --config.out=results/bench/device_check.json

Prints each measurement as it goes and writes them all as one JSON (atomically, after
each section, so that a section that fails or a run cut short keeps the ones before; a
failed section is {"error": ...}, named in "errors", and the exit status is 1):

* devices: platform, kind, count, memory; the jax version;
* matmul: measured float32 and bfloat16 FLOP/s of a jitted [n, n] x [n, n] in this process
  (experiments.bench.train.matmul_flops_per_s);
* rl_step: one compiled RL step (rollout -> credit -> update; LoRA, remat, bfloat16) of
  each method family, one method per package of experiments.harness.registry (`methods`; default
  grpo from asct_jax.rl, asct_agentuct from asct_jax.search, factor from factor_jax),
  data-parallel over every local device: step seconds, compile seconds (the programs are
  compiled as many at a time as there are cores, methods + 1), XLA's memory analysis of
  the step, and the process's peak memory so far (device memory_stats where the platform
  has them, else the process's max RSS) (experiments.bench.train's step helpers);
* fsdp: the same grpo step with train.fsdp = every local device (parameters, optimiser
  and frozen base sharded), its largest weight's shard fraction and its train metrics'
  largest absolute difference from the replicated step's;
* generate: our sampler's new tokens/s (asct_jax.models.generate) on a random
  SmolLM2-135M-shaped decoder;
* decoder: forward + backward tokens/s of the language-model loss on random
  SmolLM2-135M- and Qwen2.5-0.5B-shaped decoders in bfloat16, and model FLOP utilisation:
  6 x parameters x tokens per second (attention not counted, as experiments.bench.model)
  over the measured bfloat16 matmul rate and, for a known accelerator, its spec peak.

Scale: "full" on an accelerator (the models' shapes at [8, 1024] tokens, 32 episodes a
step, the methods' default budgets); "cpu-small" on CPU, chosen automatically: 2 layers
and an 8192-token vocabulary, a few tokens, 8 episodes a step, small method budgets, and
2 CPU devices (jax_num_cpu_devices) so that FSDP has something to shard. The JSON says
which, and gives every shape it used.
"""
from __future__ import annotations

import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Optional

from asct_jax.infra import config_cli

# Spec dense bfloat16 peak, TFLOP/s, by jax's device_kind (the utilisation's denominator).
SPEC_BF16_TFLOPS = {"NVIDIA H100 80GB HBM3": 989.0, "NVIDIA H200": 989.0,
                    "NVIDIA A100-SXM4-80GB": 312.0, "NVIDIA A100-SXM4-40GB": 312.0,
                    "TPU v4": 275.0, "TPU v5 lite": 197.0, "TPU v5": 459.0,
                    "TPU v6 lite": 918.0}
CONFIG = "experiments/configs/checks/device_check.py"
FAMILIES = ("grpo", "asct_agentuct", "factor")
CPU_DEVICES = 2

# Per scale: matmul size, decoder [batch, seq] and depth / vocabulary overrides,
# generation batch / prompt / new tokens, RL batch and method budgets.
SCALES = {
    "full": dict(matmul=8192, lm_tokens=(8, 1024), lm_overrides={},
                 gen=(32, 128, 128), rollout=(4, 8), env="household", budgets={}),
    "cpu-small": dict(matmul=1024, lm_tokens=(2, 64),
                      lm_overrides=dict(num_layers=2, vocab_size=8192),
                      gen=(2, 16, 16), rollout=(2, 4), env="household",
                      budgets={"asct.trials": 2, "vineppo.k": 2, "factor.continuations": 2,
                               "factor.horizon": 4, "ppo.epochs": 1, "ppo.minibatches": 1}),
}
RL_MODEL = {"full": dict(preset="smollm2-135m", hidden_size=0, num_layers=0, num_heads=0,
                         num_kv_heads=0, head_dim=0, intermediate_size=0),
            "cpu-small": {}}   # cpu-small: the base config's tiny policy


def peak_memory() -> Dict[str, Any]:
    """The process's peak memory so far: device memory_stats' peak_bytes_in_use where the
    platform has them, and the process's max RSS (bytes)."""
    import jax

    from asct_jax.infra.resources import peak_rss_bytes

    out = {"max_rss_bytes": peak_rss_bytes()}
    stats = jax.local_devices()[0].memory_stats() or {}
    for key in ("peak_bytes_in_use", "bytes_limit"):
        if key in stats:
            out[key] = int(stats[key])
    return out


def devices() -> Dict[str, Any]:
    import jax

    local = jax.local_devices()
    stats = local[0].memory_stats() or {}
    return {"jax": jax.__version__, "backend": jax.default_backend(),
            "device_kind": local[0].device_kind, "local_devices": len(local),
            "devices": [str(d) for d in local], "process_count": jax.process_count(),
            "memory_bytes": stats.get("bytes_limit"), "host": platform.platform(),
            "cpu_count": os.cpu_count()}


def matmul(n: int) -> Dict[str, Any]:
    import jax.numpy as jnp

    from experiments.bench.train import matmul_flops_per_s

    return {"shape": [n, n, n], **{f"{name}_tflops": matmul_flops_per_s(n, n, n, 5, dtype) / 1e12
                                    for name, dtype in (("float32", jnp.float32),
                                                        ("bfloat16", jnp.bfloat16))}}


def rl_config(scale: str, method: str, fsdp: int = 1):
    """The base config of one RL step: LoRA (rank 8), remat, bfloat16, at `scale`."""
    from experiments.configs import base
    from experiments.harness.dotted import apply_overrides

    s = SCALES[scale]
    c = base.get_config()
    c.method, c.env.name = method, s["env"]
    c.rollout.num_groups, c.rollout.group_size = s["rollout"]
    c.model.update(dict(lora_rank=8, remat=True, dtype="bfloat16", **RL_MODEL[scale]))
    c.train.fsdp = fsdp
    return apply_overrides(c, s["budgets"])


def build_step(scale: str, method: str, fsdp: int = 1):
    """(learner, lowered step) of one RL step of `method` at `scale` (not compiled yet)."""
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    from experiments.bench.train import lower_train_step
    from experiments.harness import registry

    config = rl_config(scale, method, fsdp)
    source = JaxEnvSource(config)
    learner = build_learner(config, registry.get(method), source)
    return learner, lower_train_step(learner, source)


def rl_steps(scale: str, jobs, workers: int):
    """One RL step per (method, fsdp) of `jobs`: built and lowered one by one, compiled
    `workers` at a time (XLA compiles off the GIL), then timed one by one: seconds, lower +
    compile seconds (of concurrent compiles), memory, the step's metrics."""
    import jax

    from experiments.bench.train import time_compiled_step, timed_compile

    built = []
    for method, fsdp in jobs:
        t = time.perf_counter()
        learner, lowered = build_step(scale, method, fsdp)
        built.append((learner, lowered, time.perf_counter() - t))
    with ThreadPoolExecutor(max(workers, 1)) as pool:
        compiled = list(pool.map(timed_compile, [lowered for _, lowered, _ in built]))
    rows = []
    for (method, fsdp), (learner, _, lower_s), (exe, compile_s) in zip(jobs, built, compiled):
        (state, metrics), step_s, memory = time_compiled_step(exe, learner, repeats=1)
        weights = state.frozen if state.frozen is not None else state.params
        big = max(jax.tree.leaves(weights), key=lambda x: x.size)
        rows.append({
            "method": method, "fsdp": fsdp, "episodes": learner.batch_size,
            "mesh": dict(learner.mesh.shape),
            "params": int(sum(x.size for x in jax.tree.leaves(state.params))),
            "frozen": int(sum(x.size for x in jax.tree.leaves(state.frozen))),
            "step_s": step_s, "build_and_lower_s": lower_s, "compile_s": compile_s,
            "compiled_memory_bytes": memory, "peak_memory": peak_memory(),
            "largest_weight_shard_fraction": big.addressable_shards[0].data.size / big.size,
            "metrics": {k: float(v) for k, v in metrics.items()
                        if k.startswith(("train/", "rollout/"))}})
        del state
    return rows


def random_decoder(preset: str, scale: str, seq: int):
    """A random bfloat16 decoder of `preset`'s shape (cpu-small: fewer layers, vocabulary)."""
    from flax import nnx

    from asct_jax.models import Decoder, get_preset

    cfg = get_preset(preset, dtype="bfloat16", param_dtype="bfloat16", max_seq_len=seq,
                     **SCALES[scale]["lm_overrides"])
    return Decoder(cfg, rngs=nnx.Rngs(0))


def decoder_pass(model, preset: str, batch: int, seq: int, matmul_bf16: float,
                 spec: Optional[float]) -> Dict[str, Any]:
    """Forward + backward of the LM loss (experiments.bench.model_train_pass.lm_loss):
    tokens/s, MFU."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from experiments.bench.model_train_pass import compile_apart, lm_loss
    from experiments.bench.train import timed

    graphdef, params = nnx.split(model)
    cfg = model.config
    ids = jnp.asarray(np.random.default_rng(0).integers(3, cfg.vocab_size, (batch, seq)),
                      jnp.int32)
    fn = jax.value_and_grad(lambda p, x: lm_loss(nnx.merge(graphdef, p), x))
    exe, compile_s, xla_flop = compile_apart(fn, params, ids)
    _, _, step_s = timed(exe, params, ids, repeats=3)
    n = int(sum(x.size for x in jax.tree.leaves(params)))
    tflops = 6.0 * n * batch * seq / step_s / 1e12
    return {"model": preset, "layers": cfg.num_layers, "hidden": cfg.hidden_size,
            "vocab": cfg.vocab_size, "params": n, "batch": batch, "seq": seq,
            "dtype": "bfloat16", "step_s": step_s, "compile_s": compile_s,
            "tokens_per_s": batch * seq / step_s, "model_tflops": tflops,
            "xla_tflop_per_step": xla_flop / 1e12,
            "mfu_vs_matmul_bf16": tflops / matmul_bf16,
            "mfu_vs_spec": None if spec is None else tflops / spec,
            "peak_memory": peak_memory()}


def generation(model, batch: int, prompt_len: int, new_tokens: int) -> Dict[str, Any]:
    """Our sampler (asct_jax.models.generate) at temperature 1: new tokens/s."""
    import jax
    import numpy as np

    from asct_jax.models import generate
    from experiments.bench.train import timed

    prompt = np.random.default_rng(1).integers(3, model.config.vocab_size,
                                               (batch, prompt_len)).astype(np.int32)
    mask = np.ones_like(prompt, bool)
    run = lambda: generate(model, prompt, mask, jax.random.key(0),  # noqa: E731
                           max_new_tokens=new_tokens).tokens
    _, first_s, s = timed(run, repeats=3)
    return {"model": "smollm2-135m", "layers": model.config.num_layers, "batch": batch,
            "prompt_len": prompt_len, "new_tokens": new_tokens, "s": s,
            "compile_s": max(first_s - s, 0.0), "tokens_per_s": batch * new_tokens / s}


def _max_abs_diff(a: Dict[str, float], b: Dict[str, float]) -> float:
    """The largest |a - b| over the train/ metrics both have."""
    keys = [k for k in a if k in b and k.startswith("train/")]
    return max((abs(a[k] - b[k]) for k in keys), default=0.0)


def run(methods=FAMILIES, scale: Optional[str] = None, log=print,
        save=lambda out: None) -> Dict[str, Any]:
    """Every measurement of the module docstring, as one dict. The sections run cheapest
    first, each on its own: one that fails is recorded as {"error": ...} (and the command
    exits 1) while the others still run; `save(out)` is called after each section."""
    import jax

    t0 = time.perf_counter()
    out: Dict[str, Any] = {"devices": devices(), "errors": []}
    scale = scale or ("cpu-small" if out["devices"]["backend"] == "cpu" else "full")
    spec = SPEC_BF16_TFLOPS.get(out["devices"]["device_kind"])
    out.update(scale=scale, spec_bf16_tflops=spec)
    log(f"devices: {out['devices']['local_devices']} x {out['devices']['device_kind']} "
        f"({out['devices']['backend']}, jax {jax.__version__}); scale {scale}")
    s = SCALES[scale]
    n = out["devices"]["local_devices"]
    b, p, new = s["gen"]
    batch, seq = s["lm_tokens"]

    def section(name, fn):
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 -- recorded, the other sections still run
            out[name] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            out["errors"].append(name)
            log(f"{name}: FAILED after {time.perf_counter() - t:.0f} s: "
                f"{type(e).__name__}: {str(e)[:300]}")
        out["runtime_s"] = time.perf_counter() - t0
        save(out)

    def do_matmul():
        out["matmul"] = mm = matmul(s["matmul"])
        log(f"matmul [{s['matmul']}]^3: float32 {mm['float32_tflops']:.3f} TFLOP/s, "
            f"bfloat16 {mm['bfloat16_tflops']:.3f} TFLOP/s")

    def do_decoder():
        out["decoder"] = []
        bf16 = out.get("matmul", {}).get("bfloat16_tflops") or float("nan")
        for preset in ("smollm2-135m", "qwen2.5-0.5b"):
            model = random_decoder(preset, scale, max(seq, p + new))
            d = decoder_pass(model, preset, batch, seq, bf16, spec)
            out["decoder"].append(d)
            log(f"decoder {preset} ({d['layers']} layers, vocab {d['vocab']}) fwd+bwd "
                f"[{batch}, {seq}]: {d['tokens_per_s']:.1f} tokens/s, "
                f"{d['model_tflops']:.3f} TFLOP/s = {d['mfu_vs_matmul_bf16']:.1%} of the "
                "bf16 matmul" + ("" if spec is None else f", MFU {d['mfu_vs_spec']:.1%} of spec"))
            del model

    def do_generate():
        out["generate"] = g = generation(random_decoder("smollm2-135m", scale, p + new),
                                         b, p, new)
        log(f"generate: {g['tokens_per_s']:.1f} new tokens/s (batch {b}, prompt {p}, "
            f"{new} new)")

    def do_rl():
        workers = min(os.cpu_count() or 1, len(methods) + 1)
        rows = rl_steps(scale, [(m, 1) for m in methods] + [("grpo", n)], workers)
        out["rl_step"], f = rows[:-1], rows[-1]
        out["rl_compile_workers"] = workers
        for r in out["rl_step"]:
            log(f"rl step {r['method']}: {r['step_s']:.2f} s (compile {r['compile_s']:.1f} s), "
                f"{r['episodes']} episodes, program peak "
                f"{r['compiled_memory_bytes'].get('peak', 0) / 2**20:.0f} MiB")
        ref = next((r for r in out["rl_step"] if r["method"] == "grpo"), None)
        f["max_abs_diff_vs_replicated"] = None if ref is None else _max_abs_diff(
            ref["metrics"], f["metrics"])
        out["fsdp"] = f
        log(f"fsdp grpo over {n} devices: {f['step_s']:.2f} s (compile {f['compile_s']:.1f} "
            f"s), largest weight shard {f['largest_weight_shard_fraction']:.2f}, train "
            f"metrics vs replicated: max abs diff {f['max_abs_diff_vs_replicated']:.1e}")

    for name, fn in (("matmul", do_matmul), ("decoder", do_decoder),
                     ("generate", do_generate), ("rl_step", do_rl)):
        section(name, fn)
    out["peak_memory"] = peak_memory()
    out["runtime_s"] = time.perf_counter() - t0
    return out


def main(args) -> int:
    """Runs the check of `args` (experiments/configs/checks/device_check.py); 1 if a section
    failed."""
    import jax

    # Before any device is touched: CPU only gets the fake devices FSDP shards over.
    if ("xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", "")
            and "JAX_NUM_CPU_DEVICES" not in os.environ):
        jax.config.update("jax_num_cpu_devices", CPU_DEVICES)
    from asct_jax.infra.run_logger import atomic_write_json

    result = run(tuple(m for m in args.methods.split(",") if m), args.scale or None,
                 log=lambda line: print(line, flush=True),
                 save=lambda out: atomic_write_json(args.out, out))
    atomic_write_json(args.out, result)
    failed = ", ".join(result["errors"])
    print(f"device check: {result['runtime_s']:.0f} s; wrote {args.out}"
          + (f"; FAILED: {failed}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
