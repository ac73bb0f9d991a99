#!/usr/bin/env bash
# Checks and timings of the wide flash form (bf16 mode's attention at head dims past 128 on
# sm_90a; TF_CUDA_FLASH_WIDE=0 keeps the tile kernel) on a card, in one call of about three
# minutes. Binaries built here come in by tests/gpu/pack.sh (PACK="tensorfold tf_kernel_contract"):
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_flash_wide.sh", carry=[".gpubin"])
# Writes $OUT/flash_wide.txt: the attention cases in bf16 under each setting (on plain, poisoned,
# one head a block; off) beside the whole contract in bf16, whether the on and off forms measured
# the same errors; then, where the wide form passed, the attention bench off and on, 8 layers of
# Qwen3-Next's prefill profile off and on at 4,096 and 1,024 tokens.
REPORT=flash_wide.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
M=/dev/shm/qwen3-next-80b-a3b
make_models qwen3-next-80b-a3b
i=0; P=()
for form in "TF_CUDA_FLASH_WIDE=" "TF_CUDA_POISON_SHARED=1" "TF_CUDA_ATTN_HPB=1" "TF_CUDA_FLASH_WIDE=0"; do
  i=$((i + 1))
  ( env $form timeout 150 "$B"/tf_kernel_contract --matmul-input bf16 --filter attention > "$OUT/wide_form$i.log" 2>&1
    echo "bf16 attention $form: $(grep -E 'SUMMARY|FAIL' "$OUT/wide_form$i.log" | head -8)" > "$OUT/wide_form$i.txt" ) &
  P+=($!)
done
( echo "contract bf16 (all): $(timeout 200 "$B"/tf_kernel_contract --matmul-input bf16 2>&1 | grep -E 'SUMMARY|FAIL' | head -8)" \
    > "$OUT/wide_all.txt" ) &
P+=($!)
wait "${P[@]}"
cat "$OUT"/wide_form*.txt "$OUT/wide_all.txt" >> "$R"
if diff <(grep measured "$OUT/wide_form1.log") <(grep measured "$OUT/wide_form4.log") > /dev/null; then
  echo "measured lines on and off: equal" >> "$R"
else
  echo "measured lines on and off differ:" >> "$R"
  diff <(grep measured "$OUT/wide_form1.log") <(grep measured "$OUT/wide_form4.log") | cut -c1-200 | head -12 >> "$R"
fi
el
# Timed only where the form's plain and poisoned cases all passed: a hang would spend the call.
ok() { grep -q "passed \([0-9]*\)/\1," "$1" && grep -q "passed \([0-9]*\)/\1," "$2" && ! grep -q FAIL "$1" "$2"; }
ok "$OUT/wide_form1.txt" "$OUT/wide_form2.txt" || { echo "the wide form failed: not timed" >> "$R"; cat "$R"; exit 0; }
for w in 0 ""; do
  echo "bench-attention TF_CUDA_FLASH_WIDE=$w" >> "$R"
  TF_CUDA_FLASH_WIDE=$w timeout 40 "$B"/tf_kernel_contract --filter @none --bench-attention --matmul-input bf16 2>&1 |
    grep "BENCH attention" | grep "of 256" >> "$R"
done; el
wait $MK
for pp in 4096 1024; do
  for w in 0 ""; do
    echo "== profile qwen3-next-80b-a3b TF_CUDA_FLASH_WIDE=$w --pp $pp: $(TF_CUDA_FLASH_WIDE=$w timeout 60 "$B"/tensorfold bench \
      --model $M --device cuda --pp $pp --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 --profile 2>&1 |
      sed -n '/profile: prefill/,/profile: decode/p' | grep -E 'ms wall|attention' | tr -s ' ' | tr '\n' ' ')" >> "$R"
  done
done
el
cat "$R"
