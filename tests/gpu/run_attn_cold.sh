#!/usr/bin/env bash
# Whether a batch-1 decode attention call waits on cold code and metadata rather than on its work,
# in one call of about three minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_attn_cold.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/attn_cold.txt as it goes: Nsight
# Compute's duration, warp instructions and four stall shares (no_instruction: waiting on code;
# long_scoreboard: on global loads; barrier; wait: fixed latencies) of each decode attention
# launch, (1) inside 8 layers of Qwen3-Next-80B-A3B's batch-1 decode (head dim 256), where a
# layer's weights pass through L2 between two attention calls, with caches kept and with every
# cache flushed before each launch, and (2) in the contract's attention bench, where each shape
# runs three times back to back (the second and third hot), kept and flushed. Equal hot and
# in-step times would clear coldness.
REPORT=attn_cold.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null
make_models qwen3-next-80b-a3b
M='gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size'
M="$M,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio"
M="$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
M="$M,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
M="$M,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
K='regex:attention_kernel|flash_decode|attention_merge'
# One line a launch (step_kernels.py's rows and names): name, grid, us, warp instructions, the four
# stall shares.
table() {
  PYTHONPATH=tests/gpu python3 -c '
import sys
import step_kernels
from warp_states import number
for r in step_kernels.kernel_rows(sys.stdin.read()):
    st = ["%s %.2f" % (k, number(r.get("smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" % k)))
          for k in ("no_instruction", "long_scoreboard", "barrier", "wait")]
    print("  %-44s grid %5s %8.2f us %9s inst  %s" % (
        step_kernels.short_name(r["Kernel Name"])[-44:], r.get("launch__grid_size"),
        number(r[step_kernels.METRIC]) / 1000.0, r.get("smsp__inst_executed.sum"), "  ".join(st)))
'
}
# The step first, then the bench alone (no contract case matches "@none").
wait "$MK"
for cc in none all; do
  echo "qwen3-next 8 layers b1 decode (--pp 16 --tg 4), cache-control $cc:" >> "$R"
  timeout 120 ncu --cache-control $cc --clock-control none -k "$K" --metrics "$M" --csv --page raw "$B"/tensorfold \
    bench --model /dev/shm/qwen3-next-80b-a3b --device cuda --pp 16 --tg 4 --batch 1 --matmul-input bf16 2> /dev/null |
    table >> "$R"
  el
done
for cc in none all; do
  echo "contract attention bench, bf16, cache-control $cc:" >> "$R"
  TF_BENCH_ITERS=1 timeout 120 ncu --cache-control $cc --clock-control none -k "$K" --metrics "$M" --csv --page raw \
    "$B"/tf_kernel_contract --filter @none --bench-attention --matmul-input bf16 2> /dev/null | table >> "$R"
  el
done
cat "$R"
