#!/usr/bin/env bash
# --matmul-input f32 against bf16 on the card, from prebuilt binaries in $BIN_DIR (default .gpubin):
#   tests/gpu/run_matmul_input.sh check   the kernel contract in both modes, plain and with shared
#                                          memory poisoned (bf16's attention cases under every
#                                          launch form, the mma.sync flash kernel's too, its
#                                          matmul cases under the tile forms the defaults leave
#                                          out), the GPU model tests
#                                          (MatmulInput included) and the golden check in bf16
#   tests/gpu/run_matmul_input.sh bench   prefill 4,096 and 512, decode at batch 1, 8 and 64, both
#                                          modes interleaved (tests/gpu/run_ab.sh), and the contract's
#                                          matmul timings in each mode
# Logs in $OUT.
set -u
OUT=${OUT:-gpu-out}; B=${BIN_DIR:-.gpubin}; mkdir -p "$OUT"
# Three binaries and the tracked tree pass the carry limit: a call may carry two, and check runs
# the parts whose binaries came (the rest say SKIP).
have() { [ -x "$B/$1" ] || { echo "SKIP: no $B/$1 (name it in PACK for tests/gpu/pack.sh)"; return 1; }; }
case "${1:-check}" in
check)
  if have tf_kernel_contract; then
  timeout 300 "$B"/tf_kernel_contract > "$OUT/contract_f32.log" 2>&1 &
  timeout 300 "$B"/tf_kernel_contract --matmul-input bf16 > "$OUT/contract_bf16.log" 2>&1 &
  # Again with every SM's shared memory poisoned before each launch: reads of unwritten shared
  # memory turn into NaNs the gates catch.
  TF_CUDA_POISON_SHARED=1 timeout 300 "$B"/tf_kernel_contract > "$OUT/contract_poison_f32.log" 2>&1 &
  TF_CUDA_POISON_SHARED=1 timeout 300 "$B"/tf_kernel_contract --matmul-input bf16 > "$OUT/contract_poison_bf16.log" 2>&1 &
  fi
  have tf_tests && TF_TEST_DEVICE=cuda timeout 300 "$B"/tf_tests --gtest_brief=1 \
    --gtest_filter='*MatmulInput*:*Golden*:*Invariance*:*Moe*:*WarmUp*:*Graph*' > "$OUT/tests_gpu.log" 2>&1 &
  have tensorfold && MATMUL_INPUT=bf16 timeout 300 python3 tests/gpu/golden_gpu.py "$B"/tensorfold > "$OUT/golden_bf16.log" 2>&1 &
  wait
  if have tf_kernel_contract; then
  # Every attention launch form in bf16 mode (run_checks.sh runs them at f32), all at once.
  i=0
  for form in "TF_CUDA_FLASH=0" "TF_CUDA_FLASH_SPLIT=1" "TF_CUDA_FLASH_SPLIT=2" "TF_CUDA_FLASH_SPLIT=3" \
              "TF_CUDA_FLASH_DECODE=0 TF_CUDA_FLASH_SPLIT=2" "TF_CUDA_ATTN_HPB=1" "TF_CUDA_FLASH_WG=0" "TF_CUDA_FLASH_WG2=0" \
              "TF_CUDA_FLASH_WG=0 TF_CUDA_FLASH_SPLIT=2" "TF_CUDA_ATTN_WHOLE=0" "TF_CUDA_ATTN_WHOLE=1" \
              "TF_CUDA_ATTN_WHOLE=0 TF_CUDA_FLASH_SPLIT=2" "TF_CUDA_ATTN_NARROW=1" \
              "TF_CUDA_ATTN_NARROW=1 TF_CUDA_FLASH_SPLIT=2" "TF_CUDA_ATTN_NARROW=1 TF_CUDA_ATTN_WHOLE=64" \
              "TF_CUDA_FLASH_WS=1" "TF_CUDA_FLASH_WS=1 TF_CUDA_POISON_SHARED=1" "TF_CUDA_FLASH_WS=0"; do
    i=$((i + 1))
    ( echo "bf16 $form: $(env $form timeout 200 "$B"/tf_kernel_contract --matmul-input bf16 --filter attention 2>&1 |
      grep -E 'SUMMARY|FAIL')" > "$OUT/form_a$i.txt" ) &
  done
  # In waves: 47 runs at once on one H100 reached their time limits before they ended.
  wait
  m=0
  # The matmul cases on the tile forms the defaults reach only at large shapes or not at all, plain
  # and poisoned: the 256-row tile everywhere, alone and with its running total in y; tile c's
  # one-row stages (four, as before, and six); every tile's mma issue with its branches (as for K
  # not a multiple of a stage), every tile's copies from fixed places, and every tile filled by
  # TMA (tile c too) or by cp.async (the large tiles too); tile e wherever it can run (at 17..64
  # rows too), on every folding launch it can take, and nowhere; its 256-column blocks with 64 totals
  # in registers, and none of them (the 128-column form instead); gate, up and act_mul unfused;
  # 9..16-row few-row launches splitting x each step (not reading split_x's words).
  for form in "TF_CUDA_WG_WIDE=1" "TF_CUDA_WG_WIDE=1 TF_CUDA_WG_YTOT=1" "TF_CUDA_WG_C=4" "TF_CUDA_WG_C=6" \
              "TF_CUDA_WG_FULL=0" "TF_CUDA_WG_FIXED=abcd TF_CUDA_WG_TMA=none" "TF_CUDA_WG_TMA=abcd" \
              "TF_CUDA_WG_TMA=abcd TF_CUDA_WG_FULL=0" "TF_CUDA_WG_TMA=none TF_CUDA_WG_WIDE=1" \
              "TF_CUDA_WG_TILE=e" "TF_CUDA_WG_FEW=e" "TF_CUDA_WG_WS=0" "TF_CUDA_WG_WS=1" "TF_CUDA_WG_WST=64" \
              "TF_CUDA_WG_WST=0" "TF_CUDA_GLU=0" "TF_CUDA_SKINNY_WORDS=0"; do
    for poison in 0 1; do
      i=$((i + 1))
      ( echo "bf16 $form poison=$poison: $(env $form TF_CUDA_POISON_SHARED=$poison timeout 200 "$B"/tf_kernel_contract \
        --matmul-input bf16 --filter matmul 2>&1 | grep -E 'SUMMARY|FAIL')" > "$OUT/form_m$i.txt" ) &
    done
    # Eight forms (16 runs) at a time.
    m=$((m + 1)); [ $((m % 8)) -eq 0 ] && wait
  done
  wait
  cat "$OUT"/form_a*.txt "$OUT"/form_m*.txt | tee "$OUT/contract_bf16_forms.log"
  rm -f "$OUT"/form_a*.txt "$OUT"/form_m*.txt
  grep -E "SUMMARY|FAIL|MISSED|ERROR" "$OUT"/contract_*.log | head -30
  fi
  [ -f "$OUT/tests_gpu.log" ] && grep -E "^\[  (FAILED|SKIPPED|PASSED) |tests from .* ran" "$OUT/tests_gpu.log" | head -20
  [ -f "$OUT/golden_bf16.log" ] && tail -3 "$OUT/golden_bf16.log"
  # The device tool brings back at most 8 files: the logs travel as one archive.
  (cd "$OUT" && logs=$(ls contract_*.log tests_gpu.log golden_bf16.log 2>/dev/null; true) && [ -n "$logs" ] &&
    tar -cJf check_logs.tar.xz $logs && rm -f $logs) ;;
bench)
  OUT=$OUT bash tests/gpu/run_ab.sh "${SHAPE:-llama3.1-8b}" \
    "${BENCHES:---pp 4096 --chunk 4096 --tg 2 --batch 1;--pp 512 --tg 64 --batch 1,8,64}" \
    "f32||$B/tensorfold|" "bf16||$B/tensorfold|--matmul-input bf16"
  for mi in f32 bf16; do
    timeout 120 "$B"/tf_kernel_contract --filter @none --bench --matmul-input "$mi" > "$OUT/contract_bench_$mi.log" 2>&1
  done
  grep -iE "matmul|BF16" "$OUT"/contract_bench_*.log | head -60 ;;
*) echo "usage: $0 check|bench" >&2; exit 2 ;;
esac
