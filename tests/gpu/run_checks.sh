#!/usr/bin/env bash
# Correctness on the GPU in one go, from prebuilt binaries in $BIN_DIR (default build-gpu): the
# kernel contract, the model tests on the GPU and the GPU golden check, run side by side; the
# tensor-core probe where it was built (90a); the attention cases again with every split-mode
# group forced onto the flash kernel, in its decode form at 1-3 splits a block and in its one-warp
# form (the default plan sends them there only when a round has many long rows); then the
# contract's timings alone (no case matches "@none"). Logs in $OUT.
set -u
OUT=${OUT:-gpu-out}; B=${BIN_DIR:-build-gpu}; mkdir -p "$OUT"
timeout 300 "$B"/tf_kernel_contract > "$OUT/contract.log" 2>&1 &
TF_TEST_DEVICE=cuda timeout 300 "$B"/tf_tests --gtest_brief=1 \
  --gtest_filter='*Golden*:*Recurrent*:*Invariance*:*PromptCache*:*SiblingGroup*:*Moe*:*WarmUp*:*Graph*' > "$OUT/tests_gpu.log" 2>&1 &
timeout 300 python3 tests/gpu/golden_gpu.py "$B"/tensorfold > "$OUT/golden_gpu.log" 2>&1 &
wait
[ -x "$B"/tf_probe_tensor_cores ] && timeout 60 "$B"/tf_probe_tensor_cores > "$OUT/probe.log" 2>&1
for form in "TF_CUDA_FLASH_SPLIT=1" "TF_CUDA_FLASH_SPLIT=2" "TF_CUDA_FLASH_SPLIT=3" \
            "TF_CUDA_FLASH_DECODE=0 TF_CUDA_FLASH_SPLIT=2"; do
  # shellcheck disable=SC2086
  echo "$form: $(env $form timeout 120 "$B"/tf_kernel_contract --filter attention 2>&1 | grep -E 'SUMMARY|FAIL')"
done > "$OUT/contract_attention_forms.log"
timeout 120 "$B"/tf_kernel_contract --filter @none --bench > "$OUT/contract_bench.log" 2>&1
grep -E "SUMMARY|FAIL" "$OUT/contract.log" | head -30
cat "$OUT/contract_attention_forms.log"
[ -f "$OUT/probe.log" ] && grep -E "SUMMARY|ROLES" "$OUT/probe.log"
tail -6 "$OUT/tests_gpu.log"; tail -4 "$OUT/golden_gpu.log"; grep -iE "bench|us" "$OUT/contract_bench.log" | head -40
