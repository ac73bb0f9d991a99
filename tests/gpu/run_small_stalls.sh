#!/usr/bin/env bash
# Where a hybrid decode step's small kernels stall, and two checks of a SASS-only pack, in one call
# of about five minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_small_stalls.sh", carry=[".gpubin"])
# with PACK="tensorfold". Writes $OUT/stalls.txt as it goes: Nemotron-3-Nano's decode tok/s with
# block scoring on and off (TF_CUDA_ROUTE_BLOCK) interleaved twice; whether the pack's cluster
# launches run (Qwen3-30B-A3B with TF_CUDA_SKINNY_CLUSTER=0 against the default, and Qwen3-Next's
# top-p with teams against one block a spec: a pack whose kernels hid their PTX version would read
# the same both ways); then the stall reasons of Qwen3-Next's step kernel by kernel
# (tests/gpu/warp_states.py over Nsight Compute's warp state section), its small kernels and its
# matmuls in two runs, the CSVs kept as $OUT/wss1.csv.xz and wss2.csv.xz.
REPORT=stalls.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
make_models qwen3-next-80b-a3b nemotron-3-nano-30b-a3b qwen3-30b-a3b
wait "$MK"
el
for _ in 1 2; do
  echo "nemotron b1 block on $(tps nemotron-3-nano-30b-a3b '') off $(tps nemotron-3-nano-30b-a3b TF_CUDA_ROUTE_BLOCK=0)" >> "$R"
done
echo "qwen3-30b b1 clusters default $(tps qwen3-30b-a3b '') off $(tps qwen3-30b-a3b TF_CUDA_SKINNY_CLUSTER=0)" >> "$R"
SMP=(--temperature 0.8 --top-p 0.95)
echo "qwen3-next b1 top-p teams $(tps qwen3-next-80b-a3b '' "${SMP[@]}") one block $(tps qwen3-next-80b-a3b TF_CUDA_SAMPLE_TEAM=1 "${SMP[@]}")" >> "$R"
el
# Kernel replay, each kernel named: attention_prep_kernel fails it (and an application replay
# stopped at a skinny_matmul), so the small kernels go first and the matmuls in a run of their own.
STEP_END="argmax|sample_kernel"
SMALL="moe_route|rmsnorm_kernel|delta_step|moe_combine|attention_kernel|conv_kernel|act_mul4|mul_sigmoid"
i=0
for ks in "$SMALL" "skinny_matmul"; do
  i=$((i + 1))
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$ks|$STEP_END" --section WarpStateStats \
    --section LaunchStats --section SpeedOfLight --csv --page raw "$B"/tensorfold bench \
    --model /dev/shm/qwen3-next-80b-a3b --device cuda --pp 4 --tg 3 --batch 1 --matmul-input bf16 2> /dev/null |
    xz > "$OUT/wss$i.csv.xz"
  python3 tests/gpu/warp_states.py "$OUT/wss$i.csv.xz" >> "$R" 2>&1
done
el
cat "$R"
