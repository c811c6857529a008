#!/usr/bin/env bash
# Copies the sweep's finished points (config, summary, metrics; no checkpoints) and its
# tuning files into docs/results/data/, where the next session copies them back to reuse.
set -eu
src=/work/main/results
dst=${DST:-/work/main/docs/results/data}
for exp in $(cd $src && ls -d sweep_* 2>/dev/null); do
  mkdir -p $dst/$exp
  for run in $(cd $src/$exp && ls -d *_s7 2>/dev/null); do
    if [ -f $src/$exp/$run/summary.json ]; then
      mkdir -p $dst/$exp/$run
      cp $src/$exp/$run/{config.json,summary.json,metrics.jsonl} $dst/$exp/$run/
    fi
  done
  cp $src/$exp/*_tuning.* $src/$exp/*.png $dst/$exp/ 2>/dev/null || true
done
du -sh $dst/sweep_* 
