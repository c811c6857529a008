"""The report of experiments.bench.credit: its rows as a Markdown table (the kernels at each
size, then the turn kernels against rlax) and the FACTOR pipeline's bandwidth lines, both
printed and returned.
"""
from __future__ import annotations

import os
from typing import Dict, List


def factor_summary(rows: List[Dict], bw: Dict) -> str:
    """FACTOR lines, side by side from this process: the pipeline's GB/s against the numpy
    copy and the jitted JAX copy (fresh output vs x+1 fresh, donated vs x+1 donated)."""
    lines = ["", f"FACTOR pipeline (load {os.getloadavg()[0]:.1f}; numpy copy "
             f"{bw['numpy_copy_Bps'] / 1e9:.2f} GB/s, JAX x+1 {bw['jax_elementwise_fresh_Bps'] / 1e9:.2f}"
             f" fresh / {bw['jax_elementwise_donated_Bps'] / 1e9:.2f} donated GB/s)"]
    for size in dict.fromkeys(r["size"] for r in rows if r["kernel"] == "factor"):
        fr = {r["impl"]: r for r in rows if r["kernel"] == "factor" and r["size"] == size}
        plain = fr["factor_jax"]
        don = fr["factor_jax (donated out)"]
        lines.append(
            f"  {size} ({plain['B'] * plain['T'] * plain['A'] / 1e6:.1f} M tok): "
            f"{plain['bytes_per_s'] / 1e9:.2f} GB/s = {100 * plain['frac_of_memcpy']:.0f} % numpy copy, "
            f"{100 * plain['bytes_per_s'] / bw['jax_elementwise_fresh_Bps']:.0f} % JAX copy (fresh); "
            f"donated out {don['bytes_per_s'] / 1e9:.2f} GB/s = {100 * don['frac_of_memcpy']:.0f} % numpy, "
            f"{100 * don['bytes_per_s'] / bw['jax_elementwise_donated_Bps']:.0f} % JAX copy (donated); "
            f"steady {plain['steady_s'] * 1e3:.2f} ms, compile {plain['compile_s']:.2f} s")
    text = "\n".join(lines)
    print(text)
    return text


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_table(rows: List[Dict], bw: Dict) -> str:
    lines = [
        f"memcpy (numpy.copyto, read+write): {bw['numpy_copy_Bps'] / 1e9:.2f} GB/s; "
        f"jitted JAX x+1: {bw['jax_elementwise_fresh_Bps'] / 1e9:.2f} GB/s fresh output, "
        f"{bw['jax_elementwise_donated_Bps'] / 1e9:.2f} GB/s donated buffer",
        "",
        "| size BxTxA | kernel | impl | compile s | steady ms | M items/s | GB/s | % memcpy "
        "| x numpy | max err | faults/call |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit = "tok" if r["kernel"] == "factor" else "turn"
        lines.append(
            f"| {r['size']} | {r['kernel']} | {r['impl']} | {_fmt(r['compile_s'], '.3f')} | "
            f"{r['steady_s'] * 1e3:.3f} | {r['items_per_s'] / 1e6:.1f} M{unit}/s | "
            f"{r['bytes_per_s'] / 1e9:.2f} | {100 * r['frac_of_memcpy']:.1f} | "
            f"{r['speedup_vs_numpy']:.1f} | {_fmt(r.get('max_abs_err_vs_ref'), '.1e')} | "
            f"{r['minor_faults_per_call']:.0f} |")
    turn = [r for r in rows if r.get("turn_kernel")]
    if turn:
        lines += [
            "",
            "Turn kernels (interleaved; x rlax = the matching rlax row's time / this row's):",
            "",
            "| size | kernel | impl | compile s | median us | p10 us | x rlax (median) "
            "| x rlax (p10) | x numpy | max err | load 1m |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in turn:
            lines.append(
                f"| {r['size']} | {r['kernel']} | {r['impl']} | {_fmt(r['compile_s'], '.3f')} | "
                f"{r['steady_s'] * 1e6:.1f} | {r['p10_s'] * 1e6:.1f} | "
                f"{_fmt(r.get('speedup_vs_rlax'), '.2f')} | "
                f"{_fmt(r.get('speedup_vs_rlax_p10'), '.2f')} | {r['speedup_vs_numpy']:.2f} | "
                f"{_fmt(r.get('max_abs_err_vs_ref'), '.1e')} | "
                f"{r['load_average_1m'][0]:.1f}-{r['load_average_1m'][1]:.1f} |")
    text = "\n".join(lines)
    print(text)
    return text
