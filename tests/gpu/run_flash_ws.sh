#!/usr/bin/env bash
# First checks and timings of the warp-specialized flash form (TF_CUDA_FLASH_WS=1|2, off by default)
# on a card, in one call of a few minutes. Binaries built here come in by tests/gpu/pack.sh
# (PACK="tensorfold tf_kernel_contract"):
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_flash_ws.sh", carry=[".gpubin"])
# Writes $OUT/flash_ws.txt: the attention cases in bf16 under each form, plain and poisoned; the
# attention bench with the form off, 1 and 2; the whole model's prefill of 4,096 tokens side by
# side; golden in bf16 with the form on, where time is left.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
B=${BIN_DIR:-.gpubin}
R=$OUT/flash_ws.txt
T0=$(date +%s)
el() { echo "t=$(($(date +%s) - T0))s" >> "$R"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R"
python3 scripts/make_random_model.py --shape llama3.1-8b --out /dev/shm/llama3.1-8b > /dev/null 2>&1 &
M32=$!
i=0; P=()
for form in "TF_CUDA_FLASH_WS=1" "TF_CUDA_FLASH_WS=1 TF_CUDA_POISON_SHARED=1" "TF_CUDA_FLASH_WS=2" \
            "TF_CUDA_FLASH_WS=2 TF_CUDA_POISON_SHARED=1" "TF_CUDA_FLASH_WS=1 TF_CUDA_ATTN_HPB=1" "TF_CUDA_FLASH_WS=0"; do
  i=$((i + 1))
  ( echo "bf16 $form: $(env $form timeout 90 "$B"/tf_kernel_contract --matmul-input bf16 --filter attention 2>&1 |
      grep -E 'SUMMARY|FAIL' | head -8)" > "$OUT/ws_form$i.txt" ) &
  P+=($!)
done
wait "${P[@]}"
cat "$OUT"/ws_form*.txt >> "$R"; el
# A form is timed only where its plain and poisoned cases all passed: a hang would spend the call.
ok() { grep -q "passed \([0-9]*\)/\1," "$1" && grep -q "passed \([0-9]*\)/\1," "$2" && ! grep -q FAIL "$1" "$2"; }
FORMS="0"; ok "$OUT/ws_form1.txt" "$OUT/ws_form2.txt" && FORMS="$FORMS 1"
ok "$OUT/ws_form3.txt" "$OUT/ws_form4.txt" && FORMS="$FORMS 2"
echo "forms timed: $FORMS" >> "$R"
[ "$FORMS" = "0" ] && { cat "$R"; exit 0; }
for rep in 1 2; do
  for ws in $FORMS; do
    echo "bench-attention TF_CUDA_FLASH_WS=$ws" >> "$R"
    TF_CUDA_FLASH_WS=$ws timeout 30 "$B"/tf_kernel_contract --filter @none --bench-attention --matmul-input bf16 2>&1 |
      grep "BENCH attention" | grep -v decode >> "$R"
  done
done; el
ARMS=(); for ws in $FORMS; do ARMS+=("ws$ws|TF_CUDA_FLASH_WS=$ws|$B/tensorfold|"); done
wait $M32
OUT=$OUT bash tests/gpu/run_ab.sh llama3.1-8b "--pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16" \
  "${ARMS[@]}" "${ARMS[@]}" > /dev/null
python3 tests/gpu/abparse.py "$OUT/ab_llama3.1-8b.txt" >> "$R" 2>&1; el
WS=${FORMS##* }
[ $(($(date +%s) - T0)) -gt ${GOLDEN_BY:-380} ] && { echo "golden skipped: out of time" >> "$R"; cat "$R"; exit 0; }
TF_CUDA_FLASH_WS=$WS MATMUL_INPUT=bf16 timeout 120 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -3 >> "$R"; el
cat "$R"
