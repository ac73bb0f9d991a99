#!/usr/bin/env bash
# One kernel's launches under Nsight Compute's full set, with its stall samples by SASS instruction:
#   tests/gpu/ncu_kernel.sh MODEL_DIR REGEX SKIP COUNT [BENCH ARGS]
# REGEX matches the demangled name with its template arguments, which ncu prints as "(int)1", so
# "wg_matmul<.int.1, .int.2" picks tile c; SKIP counts only matching launches, and a bench at
# depth runs its prefill's launches first (on a 2-layer model's 64-lane bench at depth 513, a skip
# of 40 decode-form launches still landed in the prefill and one of 300 in the decode). Binary:
# $BIN (default .gpubin/tensorfold); build it with -lineinfo to keep source lines. Writes
# $OUT/ncu_details.txt and $OUT/ncu_sass.csv, then prints the headline metrics and
# tests/gpu/ncu_sass.py's summary of the first launch.
set -u
MODEL=${1:?usage: ncu_kernel.sh MODEL_DIR REGEX SKIP COUNT [BENCH ARGS]}
REGEX=${2:?regex}
SKIP=${3:?skip}
COUNT=${4:?count}
shift 4
ARGS=${*:---pp 512 --depth 513 --chunk 512 --tg 256 --batch 64 --matmul-input bf16}
BIN=${BIN:-.gpubin/tensorfold}
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || find /usr/local -maxdepth 3 -path "*/bin/ncu" 2> /dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu_kernel: no ncu on this machine" >&2; exit 1; }
REP=$OUT/ncu_kernel
# shellcheck disable=SC2086
timeout 300 "$NCU" --set full --import-source yes --kernel-name-base demangled -k "regex:$REGEX" \
  --launch-skip "$SKIP" --launch-count "$COUNT" -f -o "$REP" "$BIN" bench --model "$MODEL" --device cuda $ARGS \
  > "$OUT/ncu_run.log" 2>&1 || { tail -5 "$OUT/ncu_run.log"; exit 1; }
[ -f "$REP.ncu-rep" ] || { echo "ncu_kernel: no launch matched; the kernels it saw:"; grep -E '^[0-9]+\. ' "$OUT/ncu_run.log"; exit 1; }
"$NCU" -i "$REP.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
"$NCU" -i "$REP.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_sass.csv" 2>&1
rm -f "$REP.ncu-rep"
grep -E "^  [a-z].*\(|Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|No Eligible" \
  "$OUT/ncu_details.txt" | cut -c1-160
python3 "$(dirname "$0")/ncu_sass.py" "$OUT/ncu_sass.csv" 20
