#!/usr/bin/env bash
# Checks and timings of sampling by teams of blocks (TF_CUDA_SAMPLE_TEAM) in one call of about
# five minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_sample_team.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/sample_team.txt as it goes: the contract
# in bf16, the sample cases under several team sizes (1 is the old one block a spec), poisoned and
# with the bit-by-bit searches, golden in bf16, the sampling bench alone under three team sizes,
# then decode tok/s of 8 layers of Qwen3-30B-A3B at batch 1 (twice) and 8 under three samplers,
# default against one block a spec, interleaved.
REPORT=sample_team.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
make_models qwen3-30b-a3b
( i=0
  for envs in "" "TF_CUDA_SAMPLE_TEAM=1" "TF_CUDA_SAMPLE_TEAM=3" "TF_CUDA_SAMPLE_TEAM=16" \
              "TF_CUDA_SAMPLE_TEAM=16 TF_CUDA_POISON_SHARED=1" "TF_CUDA_SAMPLE_TEAM=8 TF_CUDA_SAMPLE_SEARCH=full" \
              "TF_CUDA_SAMPLE_SPLIT=0 TF_CUDA_SAMPLE_TEAM=5"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    env $envs timeout 200 "$B"/tf_kernel_contract --matmul-input bf16 --filter sample > "$OUT/form$i.log" 2>&1
    echo "sample [$envs]: $(grep -E 'SUMMARY|FAIL' "$OUT/form$i.log" | head -4 | tr '\n' ' ')" >> "$OUT/forms.txt"
  done ) &
FP=$!
card_checks "" "bf16"
wait $FP
cat "$OUT/forms.txt" >> "$R"
rm -f "$OUT"/form*.log "$OUT"/forms.txt "$OUT"/check_*.txt
el
echo "golden bf16: $(MATMUL_INPUT=bf16 timeout 200 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -1)" >> "$R"
el
for envs in "" "TF_CUDA_SAMPLE_TEAM=1" "TF_CUDA_SAMPLE_TEAM=8"; do
  echo "bench-sample [$envs]:" >> "$R"
  # shellcheck disable=SC2086
  env $envs timeout 60 "$B"/tf_kernel_contract --filter @none --bench-sample 2>&1 | grep BENCH | sed 's/BENCH sample_rows //' >> "$R"
done
el
wait "$MK"
for b in 1 1 8; do
  for rep in 1; do
    for smp in "greedy|" "top-p 0.95 T 0.8|--temperature 0.8 --top-p 0.95" "top-k 40 top-p 0.95 T 0.8|--temperature 0.8 --top-p 0.95 --top-k 40"; do
      IFS='|' read -r sl sargs <<< "$smp"
      for v in "team|" "one_block|TF_CUDA_SAMPLE_TEAM=1"; do
        IFS='|' read -r label envs <<< "$v"
        # shellcheck disable=SC2086
        echo "qwen3-30b-a3b batch $b $sl $label: $(env $envs timeout 60 "$B"/tensorfold bench --model /dev/shm/qwen3-30b-a3b \
          --device cuda --pp 16 --tg 64 --batch $b $sargs --matmul-input bf16 --json 2>/dev/null | grep -o '"tg_tps": [0-9.]*')" >> "$R"
      done
    done
  done
  el
done
cat "$R"
