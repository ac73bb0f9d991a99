#!/usr/bin/env bash
# Checks and timings of the warp-specialized flash form (bf16 mode's prefill attention; taken by
# flash_ws_worth's rule, TF_CUDA_FLASH_WS=1 everywhere it can, =0 never) on a card, in one call of a
# few minutes. Binaries built here come in by tests/gpu/pack.sh (PACK="tensorfold tf_kernel_contract"):
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_flash_ws.sh", carry=[".gpubin"])
# Writes $OUT/flash_ws.txt: the attention cases in bf16 under each setting, plain and poisoned; the
# attention bench forced on and off; prefill side by side, the rule against off, at lengths either
# side of the rule's edge and eight prompts of 512 in one round; golden in bf16 under the rule and
# forced, where time is left.
REPORT=flash_ws.txt
source "$(dirname "$0")/call_start.sh"
i=0; P=()
for form in "TF_CUDA_FLASH_WS=1" "TF_CUDA_FLASH_WS=1 TF_CUDA_POISON_SHARED=1" "TF_CUDA_FLASH_WS=1 TF_CUDA_ATTN_HPB=1" \
            "TF_CUDA_FLASH_WS=0" "TF_CUDA_POISON_SHARED=1"; do
  i=$((i + 1))
  ( echo "bf16 $form: $(env $form timeout 90 "$B"/tf_kernel_contract --matmul-input bf16 --filter attention 2>&1 |
      grep -E 'SUMMARY|FAIL' | head -8)" > "$OUT/ws_form$i.txt" ) &
  P+=($!)
done
wait "${P[@]}"
cat "$OUT"/ws_form*.txt >> "$R"; el
# Timed only where the forced form's plain and poisoned cases all passed: a hang would spend the call.
ok() { grep -q "passed \([0-9]*\)/\1," "$1" && grep -q "passed \([0-9]*\)/\1," "$2" && ! grep -q FAIL "$1" "$2"; }
ok "$OUT/ws_form1.txt" "$OUT/ws_form2.txt" || { echo "the forced form failed: not timed" >> "$R"; cat "$R"; exit 0; }
for ws in 0 1 0 1; do
  echo "bench-attention TF_CUDA_FLASH_WS=$ws" >> "$R"
  TF_CUDA_FLASH_WS=$ws timeout 30 "$B"/tf_kernel_contract --filter @none --bench-attention --matmul-input bf16 2>&1 |
    grep "BENCH attention" | grep -v decode >> "$R"
done; el
wait $M32
ARMS=("rule|TF_CUDA_FLASH_WS=|$B/tensorfold|" "off|TF_CUDA_FLASH_WS=0|$B/tensorfold|")
OUT=$OUT bash tests/gpu/run_ab.sh llama3.1-8b "${BENCHES:---pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 --reps 2;--pp 2048 --chunk 2048 --tg 2 --batch 1 --matmul-input bf16 --reps 2;--pp 512 --tg 2 --batch 8 --matmul-input bf16 --reps 2}" \
  "${ARMS[@]}" "${ARMS[@]}" > /dev/null
python3 tests/gpu/abparse.py "$OUT/ab_llama3.1-8b.txt" >> "$R" 2>&1; el
for ws in 1 ""; do
  [ $(($(date +%s) - T0)) -gt ${GOLDEN_BY:-300} ] && { echo "golden TF_CUDA_FLASH_WS=$ws skipped: out of time" >> "$R"; continue; }
  echo "golden TF_CUDA_FLASH_WS=$ws: $(TF_CUDA_FLASH_WS=$ws MATMUL_INPUT=bf16 timeout 120 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -1)" >> "$R"
done; el
cat "$R"
