#!/usr/bin/env bash
# Issue 49's tuned-protocol runs, continued (report49.sh reordered on 2026-12-07 16:0x: the
# headline sweeps before GiGPO's), from the worktree /work/wt49r at ac061b2, results in
# /work/main/results (resumable, finished runs reused):
# 1. science's headline rows (GRPO, SERL, FACTOR on the 10 reporting seeds);
# 2. the ragspace sweep of the ASCT headline methods; 3. the generating actor's sweep;
# 4. GiGPO's sweep (the candidate tables' one untuned method).
set -u
cd /work/wt49r
R=/work/main/results
COMMON="--config.train.results_dir=$R --config.train.resume=True --config.train.progress=False"
for env in household shop science; do
  nice python -m experiments.factor_table --config experiments/configs/factor_table.py:quick_warm_tuned \
    "--config.table.methods=('grpo','factor','serl')" "--config.table.envs=('$env',)" $COMMON
done
nice python -m experiments.sweep --config experiments/configs/asct_ragspace.py:quick_warm_tuned \
  --config.sweep.methods=ppo_return,vineppo,asct_agentuct $COMMON
nice python -m experiments.sweep --config experiments/configs/factor_generate.py:quick_warm_tuned \
  --config.sweep.methods=grpo,factor,serl $COMMON
for env in shop household science; do
  nice python -m experiments.sweep --config experiments/configs/factor_table.py:quick_warm \
    --config.sweep.methods=gigpo --config.sweep.envs=$env $COMMON
done
