"""Reproduces both methods against their baselines: the ASCT table, the FACTOR table and
Figure 5, with tables and plots under results/.

    python -m experiments.reproduce --quick   # smoke scale, from the warm start
    python -m experiments.reproduce           # full scale, from scratch and warm-started

--quick runs each script's `smoke_warm` config: the shared warm start of each environment
(SFT on the noisy scripted expert), then 10 steps of 16-32 episodes per method (GiGPO
included), 2 seeds: a check of the whole pipeline whose numbers do not separate the
methods; the reduced tables of docs/results are the scripts' `quick` / `quick_warm`
configs. The full reproduction runs each script's full config from scratch (`full`) and
from the warm start (`warm`).
"""
import argparse
import os
import time

from asct_jax.infra.run_logger import atomic_write_text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the reduced reproduction")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--only", choices=("asct", "factor", "fig5"), action="append",
                        help="run only these parts (repeatable)")
    args = parser.parse_args(argv)
    args_ = ("smoke_warm",) if args.quick else ("full", "warm")
    parts = args.only or ["asct", "factor", "fig5"]

    from experiments import asct_table, factor_fig5, factor_table
    from experiments.configs import asct_table as asct_cfg
    from experiments.configs import factor_fig5 as fig5_cfg
    from experiments.configs import factor_table as factor_cfg

    jobs = {"asct": (asct_table.main, asct_cfg.get_config),
            "factor": (factor_table.main, factor_cfg.get_config),
            "fig5": (factor_fig5.main, fig5_cfg.get_config)}
    times = {}
    for arg in args_:
        for part in parts:
            run, get_config = jobs[part]
            config = get_config(arg)
            config.train.results_dir = args.results_dir
            t0 = time.time()
            print(f"\n=== {part} ({arg}) ===", flush=True)
            run(config)
            times[f"{part} ({arg})"] = time.time() - t0
    lines = [f"- {part}: {t / 60:.1f} min" for part, t in times.items()]
    name = "quick" if args.quick else "full"
    atomic_write_text(os.path.join(args.results_dir, f"reproduce_{name}_times.md"),
                      "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
