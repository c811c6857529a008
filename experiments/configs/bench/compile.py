"""The options of experiments/bench/compile.py (no import of the script: an `against` child
runs this tree's script on another revision's package).

    python -m experiments.bench.compile --config.methods=grpo,factor
    python -m experiments.bench.compile --config.depths=2,30 --config.paths=scan,unrolled \
        --config.against=4bc2fc8

methods: comma-separated; variants: comma-separated XLA flag variants; out; depths: e.g.
2,30: the decoder's passes and the methods' steps at these depths (instead of the
variants); paths: with depths, scan,unrolled; against: with depths, a git revision whose
code is measured beside this tree's at each depth. child, child_depth, path: set on the
child processes by the parent.
"""
import ml_collections

VARIANTS = "default,O1,O0,no_thunk_runtime,no_fusion_emitters"   # experiments.bench.compile's


# Not experiments.configs.options.tool_options: an `against` child loads this file with
# another revision's experiments package, which may lack that module.
def get_config(arg: str = ""):
    if arg:
        raise ValueError(f"bench compile config takes no arg, got {arg!r}")
    c = ml_collections.ConfigDict()
    c.methods = "grpo"
    c.variants = VARIANTS
    c.out = "results/bench/compile.json"
    c.depths = ""
    c.paths = "scan"
    c.child = ""
    c.child_depth = 0
    c.against = ""
    c.path = "scan"
    return c
