#!/usr/bin/env bash
# Checks and timings of the hybrid decode's small kernels in one call of about five minutes: the
# gated delta step on register columns (TF_CUDA_DELTA_REG), routing over many experts by each
# warp's best (TF_CUDA_ROUTE_WARPS) and greedy sampling over many blocks (TF_CUDA_SAMPLE_SPLIT):
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_decode_small.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/decode_small.txt as it goes: the contract
# in bf16 and at f32, each switch's cases on and off (equal measured lines: equal bits), golden in
# bf16, then decode tok/s of 8 layers of Qwen3-Next and Qwen3-30B-A3B with every switch on, the
# step alone off and all off, interleaved twice, and the three ops' times a call by --profile.
REPORT=decode_small.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
make_models qwen3-next-80b-a3b qwen3-30b-a3b
( i=0
  for f in "gated_delta|TF_CUDA_DELTA_REG=0" "gated_delta|" "gated_delta|TF_CUDA_POISON_SHARED=1" \
           "moe|TF_CUDA_ROUTE_WARPS=0" "moe|TF_CUDA_ROUTE_WARPS=1" "moe|TF_CUDA_ROUTE_WARPS=1 TF_CUDA_POISON_SHARED=1" \
           "sample|TF_CUDA_SAMPLE_SPLIT=0" "sample|"; do
    i=$((i + 1))
    IFS='|' read -r filt envs <<< "$f"
    # shellcheck disable=SC2086
    env $envs timeout 150 "$B"/tf_kernel_contract --matmul-input bf16 --filter "$filt" > "$OUT/form$i.log" 2>&1
    echo "$filt [$envs]: $(grep -E 'SUMMARY|FAIL' "$OUT/form$i.log" | head -4 | tr '\n' ' ') measured lines md5 $(grep measured "$OUT/form$i.log" | md5sum | cut -c1-8)" >> "$OUT/forms.txt"
  done ) &
FP=$!
card_checks "" "bf16" "f32"
wait $FP
cat "$OUT/forms.txt" >> "$R"
rm -f "$OUT"/form*.log "$OUT"/forms.txt "$OUT"/check_*.txt
el
echo "golden bf16: $(MATMUL_INPUT=bf16 timeout 200 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -1)" >> "$R"
el
wait "$MK"
ALL_OFF="TF_CUDA_DELTA_REG=0 TF_CUDA_ROUTE_WARPS=0 TF_CUDA_SAMPLE_SPLIT=0"
for run in "qwen3-next-80b-a3b|--pp 16 --tg 64 --batch 1" "qwen3-next-80b-a3b|--pp 16 --tg 32 --batch 64" \
           "qwen3-30b-a3b|--pp 16 --tg 64 --batch 1"; do
  IFS='|' read -r s args <<< "$run"
  for rep in 1 2; do
    for v in "on|" "step_off|TF_CUDA_DELTA_REG=0" "all_off|$ALL_OFF"; do
      IFS='|' read -r label envs <<< "$v"
      # shellcheck disable=SC2086
      echo "$s $args $label: $(env $envs timeout 60 "$B"/tensorfold bench --model /dev/shm/$s --device cuda $args \
        --matmul-input bf16 --json 2>/dev/null | grep -o '"tg_tps": [0-9.]*')" >> "$R"
    done
  done
  el
done
for v in "on|" "all_off|$ALL_OFF"; do
  IFS='|' read -r label envs <<< "$v"
  for b in 1 64; do
    # shellcheck disable=SC2086
    env $envs timeout 60 "$B"/tensorfold bench --model /dev/shm/qwen3-next-80b-a3b --device cuda --pp 16 --tg 32 \
      --batch $b --matmul-input bf16 --profile > "$OUT/profile.txt" 2>&1
    echo "profile $label batch $b, us a call: $(grep -E 'gated_delta|moe route|sample_rows' "$OUT/profile.txt" | tail -3 |
      awk '{print $6, $7, $4}' | tr '\n' ' ')" >> "$R"
  done
done
rm -f "$OUT/profile.txt"
el
cat "$R"
