#!/usr/bin/env bash
# Checks and timings of a prefill chunk's MoE expert matmuls on the warpgroup tiles, against the
# few-row kernel's 16-row items (TF_CUDA_MOE_WG=0), in one call of a few minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_moe_wg.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/moe_wg.txt: the contract in bf16, its MoE
# cases at f32 and with every layer forced onto each tile (poisoned once in each mode), the prefill
# profiles of 8 layers of Qwen3-30B-A3B, Nemotron-3-Nano and Qwen3-Next under each tile choice, and
# Qwen3-30B-A3B's and Nemotron's prefill of 4,096 side by side against TF_CUDA_MOE_WG=0.
REPORT=moe_wg.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
SHAPES="qwen3-30b-a3b nemotron-3-nano-30b-a3b qwen3-next-80b-a3b"
( for s in $SHAPES; do
    [ -d /dev/shm/$s ] || python3 scripts/make_random_model.py --shape $s --layers 8 --sparse --out /dev/shm/$s
  done ) > /dev/null 2>&1 &
MK=$!
pids=()
for form in "bf16 TF_CUDA_MOE_WG=64 TF_CUDA_POISON_SHARED=1" "bf16 TF_CUDA_MOE_WG=128" "f32" \
  "f32 TF_CUDA_MOE_WG=128 TF_CUDA_POISON_SHARED=1"; do
  ( mi=${form%% *}; envs=${form#"$mi"}
    # shellcheck disable=SC2086
    echo "contract moe cases $form: $(env $envs timeout 200 "$B"/tf_kernel_contract --matmul-input "$mi" --filter moe 2>&1 |
      grep -E 'SUMMARY|FAIL' | head -6)" > "$OUT/moe_form_${#pids[@]}.txt" ) &
  pids+=($!)
done
card_checks 'StatePool.*:*Moe*:*Qwen3*:*Nemotron*:*Golden*' "bf16"
wait "${pids[@]}"
cat "$OUT"/moe_form_*.txt >> "$R"; el
wait $MK
prof() {  # prof SHAPE ENV: the prefill profile's lines
  echo "== profile $1 $2 --pp 4096" >> "$R"
  env $2 timeout 120 "$B"/tensorfold bench --model /dev/shm/$1 --device cuda --pp 4096 --chunk 4096 --tg 2 --batch 1 \
    --matmul-input bf16 --profile 2>&1 | sed -n '/profile: prefill/,/profile: decode/p' | head -16 >> "$R"
}
for s in $SHAPES; do prof $s TF_CUDA_MOE_WG=; prof $s TF_CUDA_MOE_WG=0; done
prof qwen3-30b-a3b TF_CUDA_MOE_WG=64
prof qwen3-next-80b-a3b TF_CUDA_MOE_WG=128
el
for s in qwen3-30b-a3b nemotron-3-nano-30b-a3b; do
  b="--pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16"
  OUT=$OUT bash tests/gpu/run_ab.sh $s:8:sparse "$b" \
    "wg|TF_CUDA_MOE_WG=|$B/tensorfold|" "few|TF_CUDA_MOE_WG=0|$B/tensorfold|" "wg|TF_CUDA_MOE_WG=|$B/tensorfold|" \
    "few|TF_CUDA_MOE_WG=0|$B/tensorfold|" > /dev/null
  python3 tests/gpu/abparse.py "$OUT/ab_$s.txt" >> "$R" 2>&1
done
el
cat "$R"
