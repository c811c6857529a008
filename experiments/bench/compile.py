"""Benchmark of the training step's compilation on XLA:CPU: compile time apart from steady
state, per XLA flag variant, side by side with the default.

For each method and each flag variant (one fresh process each: XLA_FLAGS are read when the
backend starts; the persistent compilation cache off), the seed-batched train step of the
FACTOR table's `smoke_warm` config on `shop` (2 seeds, what `experiments.reproduce --config.quick`
compiles) is lowered, compiled and run: lower s, compile s, the first call, the steady
state (mean of 3 calls) and a checksum of the parameters after the 4 calls (float64 sum;
equal to the default's means the flags left the numbers alone). Prints a Markdown table
with each variant's compile and step time as a ratio of the default's; writes JSON
atomically.

    python -m experiments.bench.compile --config.methods=grpo,factor \
        --config.out=results/bench/compile.json

The options are the fields of experiments/configs/bench/compile.py. With depths (issue 37:
the decoder's layers compiled once), instead: for each decoder path (paths scan,unrolled:
the layers scanned, or the Python loop of before) and each depth, in a fresh process, the
compile seconds of a narrow random decoder's passes (training, remat training, cached
prefill, one decoding step, generation, scoring) and of the methods' RL steps on
device_check's cpu-small config at that depth; a Markdown table with the deepest /
shallowest ratio.

    python -m experiments.bench.compile --config.depths=2,30 --config.paths=scan,unrolled \
        --config.methods=grpo --config.against=4bc2fc8 --config.out=results/bench/compile_depth.json

against=REV also measures the code of git revision REV (git archive into a temporary
folder; this script imports its package) right after this tree's at each depth, and prints
this tree's compile seconds over REV's.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError

CONFIG = "experiments/configs/bench/compile.py"
# Its absolute path, which the children get (an `against` child runs in another tree).
CONFIG_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "configs", "bench", "compile.py")
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
    from experiments.configs import factor_table
    from experiments.harness import registry
    from experiments.harness.runner import check_variant

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


# --- Depth: the decoder's passes and the RL step at 2 vs 30 layers (issue 37) ----------------

PASS_MODEL = dict(vocab_size=512, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                  intermediate_size=192)   # narrow: what grows with depth is the compile
PASS_SHAPE = dict(batch=4, prompt=32, new=16)


def set_path(path: str) -> None:
    """Selects the decoder's layer loop in this process: "scan" (the default) or
    "unrolled" (the Python loop, `decoder.SCAN_LAYERS = False`)."""
    from asct_jax.models import decoder
    if path == "unrolled":
        decoder.SCAN_LAYERS = False


def decoder_passes(num_layers: int) -> dict:
    """Lower + compile seconds of a narrow random decoder's passes at `num_layers`:
    train (forward + backward of a log-likelihood), train_remat (the same under remat),
    prefill (the cached prompt pass), decode (one cached token), generate (prefill + the
    decoding loop) and score (`models.score`)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from asct_jax.models import cache as cache_lib
    from asct_jax.models.generate import _generate, _score, prefill as prefill_pass
    from asct_jax.models.config import get_preset
    from asct_jax.models.decoder import Decoder

    b, p, n = PASS_SHAPE["batch"], PASS_SHAPE["prompt"], PASS_SHAPE["new"]
    ids, mask = jnp.ones((b, p), jnp.int32), jnp.ones((b, p), bool)
    cfg = get_preset("tiny", num_layers=num_layers, **PASS_MODEL)
    graphdef, state = nnx.split(Decoder(cfg, rngs=nnx.Rngs(0)))
    remat_def, remat_state = nnx.split(Decoder(cfg.replace(remat=True), rngs=nnx.Rngs(0)))
    cache = jax.eval_shape(lambda: cache_lib.init_cache(cfg, b, p + n))

    def train(gdef):
        def loss(st, ids):
            return jnp.mean(jax.nn.log_softmax(nnx.merge(gdef, st)(ids))[..., 0])
        return jax.jit(jax.value_and_grad(loss))

    def prefill(st, ids, mask):
        return prefill_pass(nnx.merge(graphdef, st), ids, mask, n)

    def decode(st, tok, cache):
        model = nnx.merge(graphdef, st)
        hidden, cache = model.hidden_states(tok, jnp.ones_like(tok, bool), cache=cache)
        return model.logits(hidden[:, 0]), cache

    lowerings = {
        "train": lambda: train(graphdef).lower(state, ids),
        "train_remat": lambda: train(remat_def).lower(remat_state, ids),
        "prefill": lambda: jax.jit(prefill).lower(state, ids, mask),
        "decode": lambda: jax.jit(decode).lower(state, ids[:, :1], cache),
        "generate": lambda: _generate.lower(
            graphdef, state, ids, mask, jax.random.PRNGKey(0), jnp.float32(1), jnp.float32(1),
            max_new_tokens=n, greedy=False, stop_tokens=()),
        "score": lambda: _score.lower(graphdef, state, ids, mask, ids[:, :n], mask[:, :n]),
    }
    out = {}
    for name, lower in lowerings.items():
        t = time.perf_counter()
        lower().compile()
        out[name] = time.perf_counter() - t
    return out


def _layout_import(module: str, flat: str):
    """`module`, or `flat` (its name in the flat experiments/ of revisions before the
    folders) where this process imports such a revision's package (against)."""
    import importlib
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        return importlib.import_module(flat)


def rl_step(method: str, num_layers: int) -> dict:
    """Lower + compile seconds of one RL step of `method` on device_check's cpu-small config
    (LoRA rank 8, remat, bfloat16, household; its narrow policy) at `num_layers`."""
    from asct_jax.rl.build import build_learner
    from asct_jax.rl.sources import JaxEnvSource
    # an `against` child may import a revision from before the folders (experiments/ flat)
    registry = _layout_import("experiments.harness.registry", "experiments.registry")
    lower_train_step = _layout_import("experiments.bench.train",
                                      "experiments.bench_train").lower_train_step
    rl_config = _layout_import("experiments.checks.device_check",
                               "experiments.device_check").rl_config

    config = rl_config("cpu-small", method)
    config.model.num_layers = num_layers
    source = JaxEnvSource(config)
    learner = build_learner(config, registry.get(method), source)
    t = time.perf_counter()
    lower_train_step(learner, source).compile()
    return {"step": time.perf_counter() - t}


def depth_table(rows) -> str:
    """Markdown: per path and part, seconds at each depth and the deepest / shallowest."""
    depths = sorted({r["layers"] for r in rows})
    lines = [f"| path | part | {' | '.join(f'{d} layers s' for d in depths)} | "
             f"{depths[-1]} / {depths[0]} |", "|---" * (3 + len(depths)) + "|"]
    for path in dict.fromkeys(r["path"] for r in rows):
        by = {r["layers"]: r["seconds"] for r in rows if r["path"] == path}
        for part in by[depths[0]]:
            s = [by[d][part] for d in depths]
            lines.append(f"| {path} | {part} | {' | '.join(f'{x:.2f}' for x in s)} | "
                         f"{s[-1] / s[0]:.2f} |")
    return "\n".join(lines)


def checkout(rev: str) -> str:
    """A temporary copy of the repository's files at git revision `rev` (git archive): the
    code an `against` child imports."""
    import tempfile
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True).stdout.strip()
    out = tempfile.mkdtemp(prefix="bench_compile_")
    archive = subprocess.run(["git", "-C", root, "archive", rev], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    return out


def run_depths(depths, paths, methods, out: str, against: str = "") -> None:
    """Each (code, depth) in a fresh process: the decoder's passes, then each method's step.
    The codes: this tree's decoder on each of `paths`, and, with `against`, the code of
    that git revision (its default path), run right after this tree's at each depth so both
    see the same load."""
    codes = [(path, path, None) for path in paths]
    if against:
        codes.append((against, "scan", checkout(against)))
    rows = []
    for d in depths:
        for name, path, tree in codes:
            args = [f"--config={CONFIG_PATH}", f"--config.child_depth={d}",
                    f"--config.path={path}", f"--config.methods={','.join(methods)}"]
            env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_ENABLE_COMPILATION_CACHE="false")
            cmd = [sys.executable, "-m", "experiments.bench.compile", *args]
            if tree:   # this script, importing the package of `tree`
                env["PYTHONPATH"] = tree
                cmd = [sys.executable, os.path.abspath(__file__), *args]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
            if p.returncode != 0:
                sys.exit(f"{name} / {d} layers failed:\n{p.stderr[-2000:]}")
            rows.append({"path": name, "layers": d,
                         "seconds": json.loads(p.stdout.strip().splitlines()[-1])})
    print(depth_table(rows))
    if against:
        print()
        print(against_table(rows, paths[0], against))
    from asct_jax.infra.run_logger import atomic_write_json
    atomic_write_json(out, {"rows": rows, "model": PASS_MODEL, "shape": PASS_SHAPE,
                            "against": against,
                            "machine": platform.processor() or platform.machine(),
                            "cpus": os.cpu_count()})
    print(f"wrote {out}")
    if against:
        import shutil
        shutil.rmtree(codes[-1][2], ignore_errors=True)


def against_table(rows, path: str, against: str) -> str:
    """Markdown: per part and depth, this tree's seconds over `against`'s."""
    depths = sorted({r["layers"] for r in rows})
    sec = {(r["path"], r["layers"]): r["seconds"] for r in rows}
    lines = [f"| part | " + " | ".join(f"{d} L: {path} / {against}" for d in depths) + " |",
             "|---" * (1 + len(depths)) + "|"]
    for part in sec[(path, depths[0])]:
        cells = [f"{sec[(path, d)][part]:.2f} / {sec[(against, d)][part]:.2f} = "
                 f"{sec[(path, d)][part] / sec[(against, d)][part]:.2f}" for d in depths]
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def depth_child(depth: int, path: str, methods) -> dict:
    set_path(path)
    out = decoder_passes(depth)
    for m in methods:
        out[f"{m}_step"] = rl_step(m, depth)["step"]
    return out


def main(a) -> None:
    """Runs the benchmark of `a` (experiments/configs/bench/compile.py), or one child's
    measurement."""
    methods = [m for m in a.methods.split(",") if m]
    if a.child_depth:
        print(json.dumps(depth_child(a.child_depth, a.path, methods)))
        return
    if a.depths:
        run_depths([int(d) for d in a.depths.split(",")], a.paths.split(","), methods, a.out,
                   a.against)
        return
    if a.child:   # one measurement, in the process the parent started with the flags
        print(json.dumps(measure(a.child)))
        return
    variants = a.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ConfigError("variants", f"unknown {', '.join(bad)}", ", ".join(VARIANTS))
    rows = []
    for method in a.methods.split(","):
        for v in variants:
            env = dict(os.environ, XLA_FLAGS=VARIANTS[v], JAX_PLATFORMS="cpu",
                       JAX_ENABLE_COMPILATION_CACHE="false")
            p = subprocess.run([sys.executable, "-m", "experiments.bench.compile",
                                f"--config={CONFIG_PATH}", f"--config.child={method}"],
                               env=env, capture_output=True, text=True)
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
    config_cli.run_main(main, default=CONFIG)
