"""Writes the warm starts shipped with the code (experiments/artifacts/warm_start/), the ones
`python -m experiments.reproduce --config.quick` trains from: the shop analogue's of the FACTOR
table's smoke config (warm_start.phase "feedback") and the ragspace analogue's of the
ASCT table's (experiments/configs/{factor_table,asct_ragspace}.py, "smoke_warm").

    python -m experiments.harness.warm_start_artifacts                 # the missing ones
    python -m experiments.harness.warm_start_artifacts --config.force  # every one, replacing them
    python -m experiments.harness.warm_start_artifacts --config.only=shop-46d2ff40 \
        --config.out=/tmp/w

The options are the fields of experiments/configs/harness/warm_start_artifacts.py.

Each is exactly what experiments.harness.warm_start.shared would make for its config (its name:
experiments.harness.warm_start.key), made in a fresh process at XLA's default optimisation level
with train.results_dir "results" (recorded in its config.json). `shared` copies a shipped
warm start instead of making it; a config whose warm-start fields change gets another
name, finds nothing shipped and makes its own (tests/experiments/harness/test_warm_start_artifacts.py fails
until the artifacts are regenerated with this command). Its summary.json evaluates the
actor as the smoke config does (train.eval_*); the quick and full tables with the same
warm-start fields copy the same params.
"""
from __future__ import annotations

import os
import shutil

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError

CONFIG = "experiments/configs/harness/warm_start_artifacts.py"

# (config module, arg): the tables whose warm starts are shipped.
SHIPPED = (("factor_table", "smoke_warm"), ("asct_ragspace", "smoke_warm"))


def variant_configs(module: str, arg: str):
    """[(variant name, config)] of every run of the table config `module:arg` that trains
    from a shared warm start, each the config experiments.harness.runner.from_warm_start names its
    warm start by (the method's and environment's overrides applied)."""
    import importlib

    from experiments.harness.dotted import apply_overrides

    cfg = importlib.import_module(f"experiments.configs.{module}").get_config(arg)
    out = []
    for env in cfg.table.get("envs", (cfg.env.name,)):
        for m in cfg.table.methods:
            overrides = {"method": m, "env.name": env}
            if module == "asct_ragspace":
                from experiments.tables.asct_ragspace import method_overrides
                overrides.update(method_overrides(cfg, m))
            out.append((f"{module}:{arg} {env}_{m}", apply_overrides(cfg, overrides)))
    return out


def shipped_configs():
    """{warm-start name: config that makes it} of every shipped warm start (the first
    variant of SHIPPED that names it)."""
    from experiments.harness.warm_start import key

    out = {}
    for module, arg in SHIPPED:
        for _, c in variant_configs(module, arg):
            out.setdefault(key(c), c)
    return out


def build(name: str, config, root: str) -> str:
    """Makes the warm start `name` of `config` in root/name (experiments.harness.warm_start.run,
    results_dir "results"); returns the directory."""
    from experiments.harness.warm_start import run

    from asct_jax.infra.compile_cache import DEFAULT_DIR

    config = config.copy_and_resolve_references()
    config.train.results_dir = "results"
    config.train.compilation_cache = DEFAULT_DIR   # not the maker's JAX_COMPILATION_CACHE_DIR
    out = os.path.join(root, name)
    run(config, out)
    return out


def main(args):
    configs = shipped_configs()
    for name in args.only:
        if name not in configs:
            raise ConfigError("only", f"unknown warm start {name!r}", ", ".join(sorted(configs)))
    for name, config in configs.items():
        if args.only and name not in args.only:
            continue
        out = os.path.join(args.out, name)
        if os.path.exists(out):
            if not args.force:
                print(f"{out}: exists (--config.force replaces it)")
                continue
            shutil.rmtree(out)
        build(name, config, args.out)
        print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
