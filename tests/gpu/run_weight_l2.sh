#!/usr/bin/env bash
# Decode weights that L2 evicts first (TF_CUDA_WEIGHT_L2), in one call of about four minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_weight_l2.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/weight_l2.txt as it goes: the contract in
# bf16 with the policy on and off (a cache policy cannot change bits; the contract checks that the
# loads still read what they should), then batch-1 decode tok/s of the random Llama-3.1-8B and 8
# layers of Qwen3-Next-80B-A3B, Qwen3-30B-A3B and Nemotron-3-Nano-30B-A3B, on and off interleaved
# twice.
REPORT=weight_l2.txt
source "$(dirname "$0")/call_start.sh"
make_models qwen3-next-80b-a3b qwen3-30b-a3b nemotron-3-nano-30b-a3b
card_checks "" "bf16" "bf16 TF_CUDA_WEIGHT_L2=0" "f32 TF_CUDA_POISON_SHARED=1"
wait "$MK"
for s in qwen3-next-80b-a3b qwen3-30b-a3b nemotron-3-nano-30b-a3b; do
  for _ in 1 2; do
    echo "$s b1 on $(tps $s '') off $(tps $s TF_CUDA_WEIGHT_L2=0)" >> "$R"
  done
done
el
wait "$M32"
for _ in 1 2; do
  echo "llama3.1-8b b1 on $(tps llama3.1-8b '') off $(tps llama3.1-8b TF_CUDA_WEIGHT_L2=0)" >> "$R"
done
el
cat "$R"
