#!/usr/bin/env bash
# Where a batch-1 decode step of each MoE and hybrid model goes, kernel by kernel, in one call:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_steps.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract" (MODELS="SHAPE ..." profiles fewer shapes). Writes $OUT/steps.txt as it goes: the few-row matmul
# bench (bf16), then for 8 layers of Qwen3-Next-80B-A3B, Qwen3-30B-A3B and Nemotron-3-Nano-30B-A3B
# tests/gpu/step_kernels.sh's table of a greedy step, and Qwen3-Next's decode tok/s greedy and with
# top-p 0.95 at T 0.8 (teams of blocks and one block a spec).
REPORT=steps.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
MODELS=${MODELS:-qwen3-next-80b-a3b qwen3-30b-a3b nemotron-3-nano-30b-a3b}
# shellcheck disable=SC2086
make_models $MODELS
timeout 120 "$B"/tf_kernel_contract --filter @none --bench-few --matmul-input bf16 2>&1 | grep "BENCH matmul" >> "$R"
el
wait "$MK"
SMP="--temperature 0.8 --top-p 0.95"
for s in $MODELS; do
  echo "== $s" >> "$R"
  # shellcheck disable=SC2086
  BIN="$B"/tensorfold timeout 150 bash "$(dirname "$0")/step_kernels.sh" /dev/shm/$s --pp 16 --tg 6 --batch 1 \
    --matmul-input bf16 >> "$R" 2>&1
  el
done
s=qwen3-next-80b-a3b
for v in "greedy||" "top-p|$SMP|" "top-p one block|$SMP|TF_CUDA_SAMPLE_TEAM=1"; do
  IFS='|' read -r label sargs envs <<< "$v"
  # shellcheck disable=SC2086
  echo "$s batch 1 $label: $(tps $s "$envs" $sargs)" >> "$R"
done
el
cat "$R"
