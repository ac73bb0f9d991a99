#!/usr/bin/env bash
# Checks and timings of the prefill paths of the hybrid and MoE models (the SSD scan on matrices,
# the conv over row segments, the MoE lists in tiles) in one call of a few minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_ssd.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract" (or "tensorfold tf_tests": then the hybrid and MoE tests).
# Writes $OUT/ssd.txt: the contract in bf16, poisoned and at f32; the prefill profiles of 8 layers
# of Nemotron-3-Nano, Qwen3-30B-A3B and Qwen3-Next; Nemotron's prefill against TF_CUDA_SSD=0.
REPORT=ssd.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
SHAPES="nemotron-3-nano-30b-a3b qwen3-30b-a3b qwen3-next-80b-a3b"
make_models $SHAPES
card_checks 'StatePool.*:*Nemotron*:*Qwen3Next*:*Recurrent*:*Moe*:*Invariance*:*Golden*' \
  "bf16" "bf16 TF_CUDA_POISON_SHARED=1" "f32"
wait $MK
for s in $SHAPES; do
  echo "== profile $s --pp 4096" >> "$R"
  timeout 120 "$B"/tensorfold bench --model /dev/shm/$s --device cuda --pp 4096 --chunk 4096 --tg 2 --batch 1 \
    --matmul-input bf16 --profile 2>&1 | sed -n '/profile: prefill/,/profile: decode/p' | head -14 >> "$R"
done
el
OUT=$OUT bash tests/gpu/run_ab.sh nemotron-3-nano-30b-a3b:8:sparse \
  "--pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 --reps 2;--pp 32768 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16" \
  "ssd|TF_CUDA_SSD=|$B/tensorfold|" "old|TF_CUDA_SSD=0|$B/tensorfold|" "ssd|TF_CUDA_SSD=|$B/tensorfold|" \
  "old|TF_CUDA_SSD=0|$B/tensorfold|" > /dev/null
python3 tests/gpu/abparse.py "$OUT/ab_nemotron-3-nano-30b-a3b.txt" >> "$R" 2>&1; el
cat "$R"
