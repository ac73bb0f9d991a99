#!/usr/bin/env bash
# Where one decode step's device time goes, kernel by kernel: Nsight Compute times every kernel of
# a short `tensorfold bench` run one at a time (so no launch overlaps another), and the last whole
# decode step (the kernels after one draw up to the next: sample_kernel, or a greedy call's
# argmax_fold_kernel) is summed by kernel name.
#   tests/gpu/step_kernels.sh MODEL_DIR [BENCH ARGS]      (default: --pp 16 --tg 8 --batch 1)
# Binary: $BIN (default .gpubin/tensorfold). Output: one line per kernel name (calls, us a call,
# us a step, share), largest first, and the step's sum, which a real run overlaps only at the
# launch edges: compare it with 1e6 / tok/s of the same bench without ncu.
set -u
MODEL=${1:?usage: step_kernels.sh MODEL_DIR [BENCH ARGS]}
shift
ARGS=${*:---pp 16 --tg 8 --batch 1}
BIN=${BIN:-.gpubin/tensorfold}
CSV=$(mktemp)
trap 'rm -f "$CSV"' EXIT
# shellcheck disable=SC2086
ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$BIN" bench --model "$MODEL" --device cuda $ARGS > "$CSV" 2> /dev/null
python3 "$(dirname "$0")/step_kernels.py" "$CSV" "$MODEL"
