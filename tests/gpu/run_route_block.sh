#!/usr/bin/env bash
# A lone row's routing scored by the whole block (TF_CUDA_ROUTE_BLOCK), the MoE combine's loads
# together, and where small kernels' time goes, in one call of about seven minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_route_block.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/route_block.txt as it goes: the MoE
# contract cases with the switch on and off (each checks a lone row's bits against the same row
# in a batch, which warp 0's form scores), decode tok/s of
# 8 layers of Qwen3-Next and Qwen3-30B-A3B on and off interleaved twice, Qwen3-Next's step by
# kernel (each alone, caches flushed) with the switch on, and its routing with it off;
# the routing kernel's stall samples by instruction on and off (tests/gpu/ncu_kernel.sh). The
# step's stalls kernel by kernel are tests/gpu/run_small_stalls.sh's.
REPORT=route_block.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
make_models qwen3-next-80b-a3b qwen3-30b-a3b
i=0
for f in "bf16|" "bf16|TF_CUDA_ROUTE_BLOCK=0" "f32|TF_CUDA_POISON_SHARED=1" "f32|TF_CUDA_ROUTE_BLOCK=0"; do
  i=$((i + 1))
  IFS='|' read -r mi envs <<< "$f"
  # shellcheck disable=SC2086
  ( env $envs timeout 150 "$B"/tf_kernel_contract --matmul-input "$mi" --filter moe > "$OUT/form$i.log" 2>&1
    echo "moe $mi [$envs]: $(grep -E 'SUMMARY|FAIL' "$OUT/form$i.log" | head -4 | tr '\n' ' ')" > "$OUT/forms$i.txt" ) &
done
wait "$MK"
wait
cat "$OUT"/forms*.txt >> "$R"
rm -f "$OUT"/form*.log "$OUT"/forms*.txt
el
for s in qwen3-next-80b-a3b qwen3-30b-a3b; do
  for _ in 1 2; do
    echo "$s b1 on $(tps $s '') off $(tps $s TF_CUDA_ROUTE_BLOCK=0)" >> "$R"
  done
done
el
M=/dev/shm/qwen3-next-80b-a3b
echo "== qwen3-next step" >> "$R"
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw "$B"/tensorfold bench \
  --model $M --device cuda --pp 16 --tg 6 --batch 1 --matmul-input bf16 > "$OUT/t.csv" 2> /dev/null
python3 tests/gpu/step_kernels.py "$OUT/t.csv" qwen3-next >> "$R" 2>&1
TF_CUDA_ROUTE_BLOCK=0 timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$B"/tensorfold bench --model $M --device cuda --pp 16 --tg 6 --batch 1 --matmul-input bf16 > "$OUT/t.csv" 2> /dev/null
echo "route block off: $(python3 tests/gpu/step_kernels.py "$OUT/t.csv" qwen3-next 2>&1 | grep moe_route)" >> "$R"
el
rm -f "$OUT/t.csv"
# The routing kernel's stall samples by SASS instruction, a decode launch, the block's form and warp 0's.
for v in "on|" "off|TF_CUDA_ROUTE_BLOCK=0"; do
  IFS='|' read -r label envs <<< "$v"
  echo "== moe_route_kernel by instruction, block scoring $label" >> "$R"
  # shellcheck disable=SC2086
  env $envs OUT="$OUT/nk" BIN="$B"/tensorfold timeout 150 bash tests/gpu/ncu_kernel.sh $M moe_route_kernel 20 1 \
    --pp 16 --tg 8 --batch 1 --matmul-input bf16 >> "$R" 2>&1
  rm -rf "$OUT/nk"
done
el
cat "$R"
