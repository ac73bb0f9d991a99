#!/usr/bin/env bash
# Trains the default model, its draft and the hybrid concurrently on one GPU; each process stops
# inside its own wall-clock budget, so the three end together.
#   bash scripts/train/run_gpu.sh OUTDIR [BUDGET_SECONDS]
set -u
OUTDIR=${1:-scripts/train/work/runs}
BUDGET=${2:-440}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR"
pids=()
for m in default draft hybrid-nemotron; do
  "$PY" scripts/train/train.py --config "scripts/train/configs/$m.json" --out "$OUTDIR/$m" \
    --time-budget "$BUDGET" > "$OUTDIR/$m.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
