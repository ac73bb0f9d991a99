#!/usr/bin/env bash
# Checks and timings of a prefill chunk's MoE expert matmuls on the warpgroup tiles, against the
# few-row kernel's 16-row items (TF_CUDA_MOE_WG=0), in one call of about four minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_moe_wg.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/moe_wg.txt as it goes: the contract in
# bf16, its MoE cases at f32 and with every layer forced onto each tile (poisoned once in each
# mode), then the prefill profiles of 8 layers of Qwen3-30B-A3B, Nemotron-3-Nano and Qwen3-Next,
# each with the tiles and with TF_CUDA_MOE_WG=0 one after the other.
REPORT=moe_wg.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
SHAPES="qwen3-30b-a3b nemotron-3-nano-30b-a3b qwen3-next-80b-a3b"
make_models $SHAPES
pids=()
for form in "bf16 TF_CUDA_MOE_WG=1 TF_CUDA_POISON_SHARED=1" "f32" "f32 TF_CUDA_MOE_WG=1 TF_CUDA_POISON_SHARED=1"; do
  ( mi=${form%% *}; envs=${form#"$mi"}
    # shellcheck disable=SC2086
    echo "contract moe cases $form: $(env $envs timeout 130 "$B"/tf_kernel_contract --matmul-input "$mi" --filter moe 2>&1 |
      grep -E 'SUMMARY|FAIL' | head -6)" > "$OUT/moe_form_${#pids[@]}.txt" ) &
  pids+=($!)
done
echo "contract bf16: $(timeout 140 "$B"/tf_kernel_contract --matmul-input bf16 2>&1 | grep -E 'SUMMARY|FAIL' | head -8)" >> "$R"
wait "${pids[@]}"
cat "$OUT"/moe_form_*.txt >> "$R"; el
wait $MK
for s in $SHAPES; do
  for e in TF_CUDA_MOE_WG= TF_CUDA_MOE_WG=0; do
    echo "== profile $s $e --pp 4096" >> "$R"
    env $e timeout 60 "$B"/tensorfold bench --model /dev/shm/$s --device cuda --pp 4096 --chunk 4096 --tg 2 --batch 1 \
      --matmul-input bf16 --profile 2>&1 | sed -n '/profile: prefill/,/profile: decode/p' | head -14 >> "$R"
  done
done
el
cat "$R"
