"""The options of experiments/bench/credit.py.

    python -m experiments.bench.credit [--config.sizes=64x8x8,1024x16x32,4096x32x64]

sizes: comma-separated BxTxA sizes; turn_sizes: comma-separated BxT sizes for the turn
kernels only ("" for none); min_time: seconds of repeated calls per measurement (at least
5 calls); out.
"""
from experiments.configs.options import tool_options


def get_config(arg: str = ""):
    return tool_options("bench credit", arg, sizes="64x8x8,1024x16x32,4096x32x64",
                        turn_sizes="64x4,64x40,256x8,1024x16,4096x4,4096x16,4096x40", min_time=0.5,
                        out="results/bench/credit.json")
