"""Credit-kernel throughput: FACTOR (TAC + HTA + APM + C) and GAE vs NumPy and rlax.

Not a test: a script that measures, side by side in one process,
  * factor_jax's jitted pipeline as FACTOR trains with it (tac_credit -> hindsight_delta
    -> hta_scores -> apm_weights at eta = ETA -> token_coefficients), vs a vectorised
    NumPy reference of the same maths;
  * the reverse scans over turns of asct_jax.rl.advantages (jitted): `gae` (closed form,
    A = delta @ U) vs its previous reverse-lax.scan form (`gae_scan_reference`, kept in
    experiments/bench/scan_references.py),
    rlax.truncated_generalized_advantage_estimation (vmapped over episodes, jitted),
    rlax.lambda_returns (vmapped, jitted) and a NumPy GAE (reverse loop over turns,
    vectorised over episodes); and `returns_to_go` (gamma = 1) vs its scan form,
    rlax.discounted_returns (vmapped, jitted) and NumPy (reverse cumsum). Like is compared
    with like: "gae adv" rows return A only (as rlax), "gae adv+targets" rows return
    (A, A + V) (rlax's A plus the same targets add). The "x rlax" columns are the matching
    rlax row's time over this row's, from the median and from the 10th percentile of the
    per-call times (the p10 shows the kernel with less interference from other processes:
    on a loaded machine XLA's thread-pool hand-offs make the median bimodal). The turn
    kernels are measured interleaved (rounds of every implementation in turn), so load
    changes hit them alike;
  * each kernel's bytes/s (bytes of its inputs read + outputs written, i.e. the minimum
    memory traffic) against this machine's measured memory-copy bandwidth
    (numpy.copyto of a 256 MiB array: 2 x nbytes per copy), and against a jitted JAX
    elementwise copy (x + 1) for what XLA can reach.
Compile time (lower + compile) is reported apart from steady-state time (median of
repeated calls after one warm-up, each call blocked until ready).

Usage:
  python -m experiments.bench.credit [--config.sizes=64x8x8,1024x16x32,4096x32x64]
      [--config.turn_sizes=64x4,64x40,256x8,1024x16,4096x4,4096x16,4096x40]
      [--config.min_time=0.5] [--config.out=results/bench/credit.json]
turn_sizes (B x T, '' for none) benchmarks only the turn kernels (GAE, returns-to-go).
"""
from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from typing import Callable, Dict, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import factor_jax as fj
from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from experiments.bench.credit_report import factor_summary, print_table
from factor_jax.synthetic import random_batch

CONFIG = "experiments/configs/bench/credit.py"

FACTOR_INPUTS = ("rewards", "values", "baseline", "turn_mask", "teacher_logp",
                 "student_logp", "token_mask")
GAE_LAMBDA = 0.95
ETA = 0.7      # the authors' eta_0: the mixture's softmax share
CLIP_D = 3.0   # the authors' clip on delta


# ------------------------------------------------------------------------ timing helpers
def _block(x):
    return jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready")
                        else a, x)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _steady(fn: Callable, args: Sequence, min_time: float, min_calls: int = 5) -> Dict:
    """Median seconds per call after one warm-up call, and minor page faults per call
    (first touches of freshly mapped memory: glibc returns blocks over 32 MiB to the OS on
    free, so kernels whose buffers exceed that page-fault on every call)."""
    _block(fn(*args))
    times = []
    faults0 = _minor_faults()
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        _block(fn(*args))
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000:
            break
    return {"steady_s": float(np.median(times)), "p10_s": float(np.percentile(times, 10)),
            "calls": len(times),
            "minor_faults_per_call": (_minor_faults() - faults0) / len(times)}


def _jit_bench(fn: Callable, args: Sequence, min_time: float) -> Dict:
    """Compile time (lower + compile) and steady-state time of jax.jit(fn)."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    out = _steady(compiled, args, min_time)
    out["compile_s"] = compile_s
    out["output"] = compiled(*args)
    return out


def _nbytes(tree) -> int:
    return int(sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree)))


def _steady_donated(compiled: Callable, args: Sequence, index: int, min_time: float,
                    min_calls: int = 5) -> Dict:
    """Like _steady, for a function compiled with args[index] donated: each call's output
    (same shape and dtype) is fed back as args[index], so XLA writes into a recycled
    buffer instead of freshly allocated (page-faulting) memory."""
    args = list(args)
    args[index] = jnp.array(args[index], copy=True)
    args[index] = _block(compiled(*args))
    times = []
    faults0 = _minor_faults()
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        args[index] = _block(compiled(*args))
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000:
            break
    return {"steady_s": float(np.median(times)), "calls": len(times),
            "minor_faults_per_call": (_minor_faults() - faults0) / len(times)}


def memcpy_bandwidth(nbytes: int = 256 << 20, min_time: float = 1.0) -> Dict[str, float]:
    """Bytes/s (read + write, 2 x nbytes per pass) of numpy.copyto into a preallocated
    array, and of a jitted JAX x + 1 with a fresh output and with a donated buffer."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np_t = _steady(lambda: np.copyto(dst, src), (), min_time)["steady_s"]
    x = jnp.asarray(src)
    fresh_t = _steady(jax.jit(lambda a: a + 1.0), (x,), min_time)["steady_s"]
    donated = jax.jit(lambda a: a + 1.0, donate_argnums=0).lower(x).compile()
    don_t = _steady_donated(donated, (x,), 0, min_time)["steady_s"]
    return {"numpy_copy_Bps": 2 * nbytes / np_t, "jax_elementwise_fresh_Bps": 2 * nbytes / fresh_t,
            "jax_elementwise_donated_Bps": 2 * nbytes / don_t, "array_bytes": nbytes}


# ------------------------------------------------------------------- kernels under test
def factor_jax_coef(rewards, values, baseline, turn_mask, teacher_logp, student_logp,
                    token_mask):
    """The coefficients C [B, T, A] of factor_jax's kernels, as factor_pieces chains them."""
    credit = fj.tac_credit(rewards, values, baseline, turn_mask)
    delta = fj.hindsight_delta(teacher_logp, student_logp, token_mask)
    scores = fj.hta_scores(delta, credit, token_mask, CLIP_D)
    weights = fj.apm_weights(scores, token_mask, ETA)
    return fj.token_coefficients(credit, weights, token_mask)


def factor_numpy(rewards, values, baseline, turn_mask, teacher_logp, student_logp,
                 token_mask, tau=1.0):
    """Vectorised NumPy reference of TAC + HTA + APM (the mixture at ETA) + C."""
    v = np.where(turn_mask, values, 0.0)
    v_now = v.copy()
    v_now[:, 0] = baseline
    v_next = np.zeros_like(v)
    v_next[:, :-1] = np.where(turn_mask[:, 1:], v[:, 1:], 0.0)
    credit = np.where(turn_mask, np.where(turn_mask, rewards, 0.0) + v_next - v_now, 0.0)
    delta = np.where(token_mask, teacher_logp - student_logp, 0.0)
    s = np.sign(credit)[..., None] * np.clip(delta, -CLIP_D, CLIP_D) / tau
    s = np.where(token_mask, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.where(token_mask, np.exp(s - mx), 0.0)
    length = token_mask.sum(-1, keepdims=True)
    soft = e / np.where(e.sum(-1, keepdims=True) > 0, e.sum(-1, keepdims=True), 1.0)
    omega = np.where(token_mask, (1.0 - ETA) + ETA * length * soft, 0.0)
    return (credit[..., None] * omega).astype(np.float32)


GAMMA_RTG = 1.0


def gae_asct():
    """asct_jax.rl.advantages.gae, imported lazily (written in parallel by another engineer)."""
    try:
        from asct_jax.rl.advantages import gae
    except ImportError:
        return None
    return lambda rewards, values, turn_mask: gae(rewards, values, turn_mask, 1.0, GAE_LAMBDA)


def _turn_impls():
    """{name: (kernel, fn, reference rlax impl or None)} of the jitted turn kernels."""
    from asct_jax.rl import advantages as adv
    import rlax
    from experiments.bench.scan_references import gae_scan_reference, returns_to_go_scan_reference

    def gae_pair(fn):
        return lambda r, v, m: fn(r, v, m, 1.0, GAE_LAMBDA)

    def gae_adv(fn):
        return lambda r, v, m: fn(r, v, m, 1.0, GAE_LAMBDA)[0]

    def rlax_gae(r, v, m):
        mf = m.astype(r.dtype)
        m_next = jnp.pad(mf[:, 1:], ((0, 0), (0, 1)))
        v_ext = jnp.pad(v * mf, ((0, 0), (0, 1)))  # V after the last turn = 0
        a = jax.vmap(rlax.truncated_generalized_advantage_estimation,
                     in_axes=(0, 0, None, 0))(r * mf, m_next, GAE_LAMBDA, v_ext)
        return a * mf

    def rlax_gae_pair(r, v, m):
        a = rlax_gae(r, v, m)
        return a, (a + v) * m.astype(r.dtype)

    def rlax_lambda(r, v, m):
        mf = m.astype(r.dtype)
        m_next = jnp.pad(mf[:, 1:], ((0, 0), (0, 1)))
        v_next = jnp.pad(v[:, 1:] * mf[:, 1:], ((0, 0), (0, 1)))
        ret = jax.vmap(rlax.lambda_returns, in_axes=(0, 0, 0, None))(r * mf, m_next, v_next,
                                                                    GAE_LAMBDA)
        return ret * mf

    def rlax_rtg(r, m):
        mf = m.astype(r.dtype)
        m_next = jnp.pad(mf[:, 1:], ((0, 0), (0, 1)))
        return jax.vmap(rlax.discounted_returns, in_axes=(0, 0, None))(
            r * mf, GAMMA_RTG * m_next, 0.0) * mf

    R_ADV, R_PAIR, R_RTG = ("rlax.truncated_gae (vmap)", "rlax.truncated_gae+targets (vmap)",
                            "rlax.discounted_returns (vmap)")
    return {
        "asct gae adv": ("gae adv", gae_adv(adv.gae), R_ADV),
        "asct gae_scan_reference adv (old)": ("gae adv", gae_adv(gae_scan_reference), R_ADV),
        R_ADV: ("gae adv", rlax_gae, R_ADV),
        "rlax.lambda_returns - V (vmap)": ("gae adv", lambda r, v, m: rlax_lambda(r, v, m)
                                           - v * m.astype(r.dtype), R_ADV),
        "asct_jax.rl.advantages.gae": ("gae adv+targets", gae_pair(adv.gae), R_PAIR),
        "asct gae_scan_reference (old)": ("gae adv+targets", gae_pair(gae_scan_reference),
                                          R_PAIR),
        R_PAIR: ("gae adv+targets", rlax_gae_pair, R_PAIR),
        "asct returns_to_go": ("rtg", lambda r, m: adv.returns_to_go(r, m, GAMMA_RTG), R_RTG),
        "asct returns_to_go_scan_reference (old)": (
            "rtg", lambda r, m: returns_to_go_scan_reference(r, m, GAMMA_RTG), R_RTG),
        R_RTG: ("rtg", rlax_rtg, R_RTG),
    }


def gae_numpy(rewards, values, turn_mask, lam=GAE_LAMBDA):
    """Reverse loop over turns, vectorised over episodes (gamma = 1)."""
    m = turn_mask.astype(rewards.dtype)
    v = values * m
    adv = np.zeros_like(rewards)
    nxt_adv = np.zeros(rewards.shape[0], rewards.dtype)
    for t in range(rewards.shape[1] - 1, -1, -1):
        m_next = m[:, t + 1] if t + 1 < rewards.shape[1] else 0.0
        v_next = v[:, t + 1] if t + 1 < rewards.shape[1] else 0.0
        delta = rewards[:, t] * m[:, t] + m_next * v_next - v[:, t]
        nxt_adv = (delta + lam * m_next * nxt_adv) * m[:, t]
        adv[:, t] = nxt_adv
    return adv


def rtg_numpy(rewards, turn_mask):
    """Undiscounted returns-to-go: a reverse cumsum over turns (prefix mask)."""
    x = np.where(turn_mask, rewards, 0.0)
    return np.cumsum(x[:, ::-1], axis=1)[:, ::-1] * turn_mask


def _interleaved(fns: Dict[str, Callable], args: Dict[str, Sequence], min_time: float,
                 rounds: int = 5) -> Dict[str, Dict]:
    """_steady for several functions in `rounds` interleaved rounds of min_time / rounds
    each; the per-call times of all rounds are pooled."""
    times = {k: [] for k in fns}
    faults = {k: 0 for k in fns}
    for f in fns:
        _block(fns[f](*args[f]))
    for _ in range(rounds):
        for k, f in fns.items():
            start = time.perf_counter()
            f0 = _minor_faults()
            n = 0
            while n < 3 or time.perf_counter() - start < min_time / rounds:
                t0 = time.perf_counter()
                _block(f(*args[k]))
                times[k].append(time.perf_counter() - t0)
                n += 1
                if n >= 400:
                    break
            faults[k] += _minor_faults() - f0
    return {k: {"steady_s": float(np.median(t)), "p10_s": float(np.percentile(t, 10)),
                "calls": len(t), "minor_faults_per_call": faults[k] / len(t)}
            for k, t in times.items()}


def bench_turn_kernels(b: Dict[str, np.ndarray], min_time: float, copy_Bps: float,
                       size: str) -> List[Dict]:
    """GAE and returns-to-go rows at the batch's [B, T]: ours, our old scan form, rlax, NumPy."""
    B, T = b["rewards"].shape
    np_args = [b["rewards"], b["values"], b["turn_mask"]]
    j = [jnp.asarray(x) for x in np_args]
    g_ref = gae_numpy(*np_args)
    r_ref = rtg_numpy(b["rewards"], b["turn_mask"])
    refs = {"gae adv": g_ref, "gae adv+targets": g_ref, "rtg": r_ref}
    impls = _turn_impls()
    compiled, compile_s, args = {}, {}, {}
    for name, (kernel, fn, _) in impls.items():
        a = j if kernel != "rtg" else [j[0], j[2]]
        t0 = time.perf_counter()
        compiled[name] = jax.jit(fn).lower(*a).compile()
        compile_s[name] = time.perf_counter() - t0
        args[name] = a
    # The floor: one fused elementwise kernel over the same [B, T] (above XLA's 1000-flop
    # "cheap computation" bar, so dispatched like the kernels above, not inline).
    floor = "floor: jitted r*v+r-v (one kernel)"
    compiled[floor] = jax.jit(lambda r, v: r * v + r - v).lower(j[0], j[1]).compile()
    args[floor] = j[:2]
    compiled["numpy gae"] = gae_numpy
    args["numpy gae"] = np_args
    compiled["numpy rtg"] = rtg_numpy
    args["numpy rtg"] = [b["rewards"], b["turn_mask"]]
    load0 = os.getloadavg()[0]
    res = _interleaved(compiled, args, min_time)
    load1 = os.getloadavg()[0]
    rows = []
    for name in compiled:
        if name.startswith("numpy") or name == floor:
            kernel, ref_impl = ("rtg" if name == "numpy rtg" else "gae adv"), None
        else:
            kernel, _, ref_impl = impls[name]
        out = compiled[name](*args[name])
        first = out[0] if isinstance(out, tuple) else out
        r = res[name]
        io = _nbytes(args[name]) + _nbytes(out)
        rows.append({
            "turn_kernel": True, "size": size, "B": B, "T": T, "A": None, "kernel": kernel, "impl": name,
            "compile_s": compile_s.get(name), "steady_s": r["steady_s"], "p10_s": r["p10_s"],
            "calls": r["calls"], "minor_faults_per_call": r["minor_faults_per_call"],
            "items_per_s": B * T / r["steady_s"], "bytes": io, "bytes_per_s": io / r["steady_s"],
            "frac_of_memcpy": io / r["steady_s"] / copy_Bps,
            "max_abs_err_vs_ref": None if name == floor else
            float(np.max(np.abs(np.asarray(first) - refs[kernel]))),
            "rlax_impl": ref_impl,
            "speedup_vs_rlax": (res[ref_impl]["steady_s"] / r["steady_s"]) if ref_impl else None,
            "speedup_vs_rlax_p10": (res[ref_impl]["p10_s"] / r["p10_s"]) if ref_impl else None,
            "speedup_vs_numpy": res["numpy rtg" if kernel == "rtg" else "numpy gae"]["steady_s"]
            / r["steady_s"],
            "load_average_1m": [load0, load1]})
    return rows


# ------------------------------------------------------------------------------- main
def bench_size(B: int, T: int, A: int, min_time: float, copy_Bps: float) -> List[Dict]:
    rng = np.random.default_rng(0)
    b = random_batch(rng, B, T, A, turn_lengths=rng.integers(T // 2 + 1, T + 1, size=B))
    j = {k: jnp.asarray(b[k]) for k in b}
    rows = []

    def add(kernel, impl, args, res, units, out, ref=None):
        steady = res["steady_s"]
        io = _nbytes(args) + _nbytes(out)
        row = {"size": f"{B}x{T}x{A}", "B": B, "T": T, "A": A, "kernel": kernel, "impl": impl,
               "compile_s": res.get("compile_s"), "steady_s": steady, "calls": res["calls"],
               "minor_faults_per_call": res["minor_faults_per_call"],
               "items_per_s": units / steady, "bytes": io, "bytes_per_s": io / steady,
               "frac_of_memcpy": io / steady / copy_Bps}
        if ref is not None:
            row["max_abs_err_vs_ref"] = float(np.max(np.abs(np.asarray(out) - ref)))
        rows.append(row)
        return row

    fargs = [j[k] for k in FACTOR_INPUTS]
    nargs = [b[k] for k in FACTOR_INPUTS]
    tokens = B * T * A
    r_np = _steady(factor_numpy, nargs, min_time)
    ref = factor_numpy(*nargs)
    add("factor", "numpy", nargs, r_np, tokens, ref)
    res = _jit_bench(factor_jax_coef, fargs, min_time)
    add("factor", "factor_jax", fargs, res, tokens, res["output"], ref)
    # Same kernel writing C into the donated teacher_logp buffer (no fresh allocation).
    t_index = FACTOR_INPUTS.index("teacher_logp")
    t0 = time.perf_counter()
    donated = jax.jit(factor_jax_coef, donate_argnums=t_index).lower(*fargs).compile()
    compile_s = time.perf_counter() - t0
    res = dict(_steady_donated(donated, fargs, t_index, min_time), compile_s=compile_s)
    add("factor", "factor_jax (donated out)", fargs, res, tokens, ref)
    rows[-1].pop("max_abs_err_vs_ref", None)

    base = [r for r in rows if r["kernel"] == "factor" and r["impl"] == "numpy"][0]
    for r in rows:
        r["speedup_vs_numpy"] = base["steady_s"] / r["steady_s"]
    rows.extend(bench_turn_kernels(b, min_time, copy_Bps, f"{B}x{T}x{A}"))
    return rows


def main(args):
    """Runs the benchmark of `args` (experiments/configs/bench/credit.py)."""
    sizes, turn_sizes = [], []
    for s in filter(None, args.turn_sizes.split(",")):
        try:
            B, T = (int(v) for v in s.lower().split("x"))
        except ValueError:
            raise ConfigError("turn_sizes", f"{s!r} is not a BxT pair",
                              "e.g. 64x8,256x16") from None
        turn_sizes.append((B, T))
    for s in filter(None, args.sizes.split(",")):
        try:
            B, T, A = (int(v) for v in s.lower().split("x"))
        except ValueError:
            raise ConfigError("sizes", f"{s!r} is not a BxTxA triple",
                              "e.g. 64x8x8,1024x16x32") from None
        sizes.append((B, T, A))
    load_before = os.getloadavg()[0]
    bw = memcpy_bandwidth()
    rows = []
    for B, T, A in sizes:
        print(f"[bench_credit] {B}x{T}x{A} ...", file=sys.stderr, flush=True)
        rows.extend(bench_size(B, T, A, args.min_time, bw["numpy_copy_Bps"]))
    for B, T in turn_sizes:
        print(f"[bench_credit] turn kernels {B}x{T} ...", file=sys.stderr, flush=True)
        rng = np.random.default_rng(0)
        b = random_batch(rng, B, T, 1, turn_lengths=rng.integers(T // 2 + 1, T + 1, size=B))
        rows.extend(bench_turn_kernels(b, args.min_time, bw["numpy_copy_Bps"], f"{B}x{T}"))
    table = print_table(rows, bw)
    table += factor_summary(rows, bw)
    meta = {"load_average_1m": [load_before, os.getloadavg()[0]], "jax": jax.__version__,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(),
            "gae_impl": "asct_jax.rl.advantages.gae" if gae_asct() else "absent",
            "gae_lambda": GAE_LAMBDA, "rtg_gamma": GAMMA_RTG, "bytes_model": "inputs read + outputs written"}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "bandwidth": bw, "rows": rows, "table_md": table}, f, indent=1)
    print(f"saved {args.out}", file=sys.stderr)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
