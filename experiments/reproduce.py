"""Reproduces both methods against their baselines: the ASCT table (the paper's ASCT on
the RAGSpace analogue, experiments/tables/asct_ragspace.py), the FACTOR table and Figure 5, with
tables and plots under results/.

    python -m experiments.reproduce --config.quick   # smoke scale, from the warm start
    python -m experiments.reproduce                  # full scale, from scratch and warm-started

The options are the fields of experiments/configs/reproduce.py (`--config.<field>=<value>`).

--config.quick runs each script's `smoke_warm` config: the shared warm start of each environment
(SFT on the noisy scripted expert; ragspace's smoothed, shop's with the hindsight phase),
then ASCT's 3 iterations of 32 questions (PPO, VinePPO, AgentUCT) and FACTOR's 10 steps of
2 x 8 episodes on shop (GRPO, SERL, FACTOR, GiGPO), 2 reporting seeds: a scale at which
every method moves the greedy actor (each table's "against its own start" rows), whose
paired comparisons are printed with their intervals and are inconclusive at this scale;
the decision tables of docs/results are the scripts' `quick_warm` configs. The full
reproduction runs each script's full config from scratch (`full`) and
from the warm start (`warm`).

--config.quick's Figure 5 diagnoses the FACTOR table's shop seed-42 run (fig5.train_run: its
training fields and last checkpoint) instead of training FACTOR a second time.

--config.jobs=2 (the default) runs the ASCT table in a second process beside the FACTOR table and
then Figure 5, its output in results/reproduce_side.log: most of a smoke run is XLA
compilation, which uses one core, so two processes on 2 cores take less time than one
(2026-12-03, a slow machine, empty cache: 11.0 min against ~17 min for the same parts one
after another).
The numbers do not depend on it.

--config.quick compiles with XLA:CPU's backend optimisation level 1 (`--config.xla_opt_level`,
default 1 with quick, XLA's own default otherwise; appended to XLA_FLAGS before JAX starts, and
inherited by the second process): the smoke run is compile-bound and O1 compiles the train
steps ~20 % faster for ~5 % slower steps (docs/benchmarks.md). Empty cache, idle machine:
4.6 min at XLA's default, 4.1 min at O1 (2026-12-04; 6.5 / 5.4 min on 2026-12-03's slower
machine), every table cell equal but the wall clocks (per-step metrics equal to float
rounding, not bit for bit). A run is deterministic at either level;
`--config.xla_opt_level=default` compiles as the full runs do.

--config.quick trains from the warm starts shipped with the code (experiments/artifacts/warm_start/,
experiments/harness/warm_start_artifacts.py; built at XLA's default level), shows no progress bars
(train.progress False) but one line per finished run, each part's tables and log in
results/reproduce_<part>.log (and its .md / .json under results/<experiment>/), and ends
with one screen (experiments/harness/quick_summary.py, also results/reproduce_quick_summary.txt):
what ran and at what scale, each comparison beside the 10-seed decision table's verdict
for the same row, and where the pages and plots are.
"""
import contextlib
import os
import subprocess
import sys
import time

from asct_jax.infra import config_cli
from asct_jax.infra.checks import ConfigError
from asct_jax.infra.run_logger import atomic_write_text

CONFIG = "experiments/configs/reproduce.py"
SIDE = ("asct",)          # the parts jobs=2 runs in the second process, in this order
OPT_LEVEL_FLAG = "--xla_backend_optimization_level"


def use_xla_opt_level(level):
    """Appends XLA:CPU's backend optimisation level to XLA_FLAGS (before JAX's backend
    starts; child processes inherit it). `level`: "default" (nothing) or "0".."3"."""
    if level == "default":
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if OPT_LEVEL_FLAG in flags:
        raise ConfigError("xla_opt_level", f"XLA_FLAGS already sets {OPT_LEVEL_FLAG}",
                          "default (keep XLA_FLAGS' level)")
    os.environ["XLA_FLAGS"] = f"{flags} {OPT_LEVEL_FLAG}={level}".strip()


def main(args):
    """Runs the parts `args` asks for (experiments/configs/reproduce.py's config)."""
    level = args.xla_opt_level or ("1" if args.quick else "default")
    use_xla_opt_level(level)
    args_ = ("smoke_warm",) if args.quick else ("full", "warm")
    parts = list(args.only) or ["asct", "factor", "fig5"]
    side, start = None, time.time()
    side_parts = [p for p in parts if p in SIDE]
    if args.jobs == 2 and side_parts and len(side_parts) < len(parts):
        parts = [p for p in parts if p not in SIDE]
        os.makedirs(args.results_dir, exist_ok=True)
        log_path = os.path.join(args.results_dir, "reproduce_side.log")
        # The second process inherits this one's XLA_FLAGS (the level already in them).
        cmd = [sys.executable, "-m", "experiments.reproduce", "--config.jobs=1",
               f"--config.results_dir={args.results_dir}", "--config.xla_opt_level=default",
               f"--config.only={tuple(side_parts)!r}"]
        cmd += ["--config.quick", "--config.side"] if args.quick else []
        print(f"{' then '.join(side_parts)} in a second process, log: {log_path}", flush=True)
        side_log = open(log_path, "w")
        # quick: the second process's one-line statuses on this terminal, the rest logged.
        side = subprocess.Popen(cmd, stdout=None if args.quick else side_log,
                                stderr=subprocess.STDOUT if not args.quick else side_log)

    from experiments.configs import asct_ragspace as asct_cfg
    from experiments.configs import factor_fig5 as fig5_cfg
    from experiments.configs import factor_table as factor_cfg
    from experiments.tables import asct_ragspace, factor_fig5, factor_table

    jobs = {"asct": (asct_ragspace.main, asct_cfg),
            "factor": (factor_table.main, factor_cfg),
            "fig5": (factor_fig5.main, fig5_cfg)}
    from experiments.harness import runner

    times, configs, terminal = {}, {}, sys.stdout
    try:
        for arg in args_:
            for part in parts:
                run, cfg_module = jobs[part]
                config = cfg_module.get_config(arg)
                config.train.results_dir = args.results_dir
                if args.quick:
                    config.train.progress = False   # a line per run instead (runner.STATUS)
                    configs[part] = config
                if part == "fig5" and args.quick and "factor (smoke_warm)" in times:
                    # Figure 5 diagnoses the FACTOR table's own run (no second training).
                    table = factor_cfg.get_config(arg)
                    config.fig5.train_run = (f"{table.train.experiment}/{config.env.name}_"
                                             f"factor_s{table.table.seeds[0]}")
                config_cli.validate(config, cfg_module.get_constraints())
                t0 = time.time()
                if args.quick:
                    os.makedirs(args.results_dir, exist_ok=True)
                    log = os.path.join(args.results_dir, f"reproduce_{part}.log")
                    print(f"[{part}] started; its tables and output: {log}", flush=True)
                    runner.STATUS = lambda line, p=part: print(f"[{p}] {line}", flush=True,
                                                               file=terminal)
                    with open(log, "w") as f, contextlib.redirect_stdout(f), \
                            contextlib.redirect_stderr(f):
                        run(config)
                    print(f"[{part}] done in {(time.time() - t0) / 60:.1f} min", flush=True)
                else:
                    print(f"\n=== {part} ({arg}) ===", flush=True)
                    run(config)
                times[f"{part} ({arg})"] = time.time() - t0
    except BaseException as err:
        if side is not None:   # no orphaned second process
            side.terminate()
            side.wait()
        if isinstance(err, ConfigError):
            config_cli.exit_config_error(err)
        raise
    name = "quick" if args.quick else "full"
    times_path = os.path.join(args.results_dir, f"reproduce_{name}_times.md")
    lines = [f"- {part}: {t / 60:.1f} min" for part, t in times.items()]
    if side is not None:
        side.wait()
        side_log.close()
        if side.returncode != 0:
            sys.exit(f"the second process ({', '.join(side_parts)}) failed "
                     f"(exit {side.returncode}); see {log_path}")
        if not args.quick:   # its tables and times, written by the second process
            with open(log_path) as f:
                print(f"\n=== {', '.join(side_parts)} (second process, {log_path}) ===\n"
                      + "".join(l for l in f if l.startswith(("|", "wrote"))), flush=True)
        with open(times_path) as f:
            lines = [l.rstrip("\n") for l in f if l.startswith("- ")] + lines
        lines.append(f"- total (2 processes): {(time.time() - start) / 60:.1f} min")
    atomic_write_text(times_path, "\n".join(lines) + "\n")
    if not args.quick:
        print("\n".join(lines))
    elif not args.side:
        print("\n" + final_screen(args, configs, time.time() - start, side_parts), flush=True)


def final_screen(args, configs, seconds, side_parts) -> str:
    """experiments/harness/quick_summary.py's screen of this quick run (the second process's parts
    read from their configs), written to results/reproduce_quick_summary.txt too."""
    from experiments.configs import asct_ragspace as asct_cfg
    from experiments.harness import quick_summary

    tables = {}
    for part in ("asct", "factor"):
        if part in configs:
            tables[part] = configs[part]
        elif part in side_parts:
            tables[part] = asct_cfg.get_config("smoke_warm")
    fig5 = None
    if "fig5" in configs:
        fig5 = os.path.join(args.results_dir, "factor_fig5", f"{configs['fig5'].fig5.name}.png")
    text = quick_summary.screen(tables, args.results_dir, seconds / 60, fig5_png=fig5)
    atomic_write_text(os.path.join(args.results_dir, "reproduce_quick_summary.txt"),
                      text + "\n")
    return text


if __name__ == "__main__":
    config_cli.run_main(main, default=CONFIG)
