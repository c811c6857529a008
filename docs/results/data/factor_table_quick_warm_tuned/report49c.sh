#!/usr/bin/env bash
# Issue 49, a second process beside report49b.sh (2026-12-07 19:0x, the second core was idle):
# the generating actor's sweep (report49b.sh's step 3, which then reuses its finished points),
# from /work/wt49r at ac061b2, results in /work/main/results (resumable).
set -u
cd /work/wt49r
R=/work/main/results
COMMON="--config.train.results_dir=$R --config.train.resume=True --config.train.progress=False"
nice python -m experiments.sweep --config experiments/configs/factor_generate.py:quick_warm_tuned \
  --config.sweep.methods=grpo,factor,serl $COMMON
