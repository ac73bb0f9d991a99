#!/usr/bin/env bash
# The routing switch's final binary checked and timed, in one call of about four minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_route_check.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/route_check.txt as it goes: the whole
# contract in bf16, its MoE cases at f32 poisoned and with TF_CUDA_ROUTE_BLOCK=0 (a lone row's
# bits are checked against the same row in a batch, which warp 0's form scores), then decode tok/s
# at batch 1 of 8 layers of Qwen3-Next, Qwen3-30B-A3B and Nemotron-3-Nano with the switch on and
# off, interleaved REPS times (default 2).
REPORT=route_check.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
make_models qwen3-next-80b-a3b qwen3-30b-a3b nemotron-3-nano-30b-a3b
( echo "contract moe f32 poisoned: $(TF_CUDA_POISON_SHARED=1 timeout 150 "$B"/tf_kernel_contract --matmul-input f32 \
    --filter moe 2>&1 | grep -E 'SUMMARY|FAIL' | head -4)" > "$OUT/moe1.txt"
  echo "contract moe bf16 block off: $(TF_CUDA_ROUTE_BLOCK=0 timeout 150 "$B"/tf_kernel_contract --matmul-input bf16 \
    --filter moe 2>&1 | grep -E 'SUMMARY|FAIL' | head -4)" > "$OUT/moe2.txt" ) &
MOE=$!
card_checks @none "bf16"
wait "$MOE"
cat "$OUT"/moe*.txt >> "$R"
rm -f "$OUT"/moe*.txt "$OUT"/check_*.txt
wait "$MK"
for _ in $(seq "${REPS:-2}"); do
  for s in qwen3-next-80b-a3b qwen3-30b-a3b nemotron-3-nano-30b-a3b; do
    echo "$s b1 on $(tps $s '') off $(tps $s TF_CUDA_ROUTE_BLOCK=0)" >> "$R"
  done
  el
done
cat "$R"
