#!/usr/bin/env bash
# Checks and timings of the bf16 planes that the kernels writing a matmul's input (norms, act_mul,
# attention) leave for it (bf16 mode; TF_CUDA_PLANES=0 turns them off) on a card, in one call of a
# few minutes. Binaries built here come in by tests/gpu/pack.sh (PACK="tensorfold
# tf_kernel_contract", and tf_tests where the tree has room):
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_planes.sh", carry=[".gpubin"])
# Writes $OUT/planes.txt: the contract in bf16 (plain, poisoned, planes off) and at f32, the
# MatmulInput tests on the card (where packed), prefill of 4,096 and decode rounds of 16 and 64 rows
# side by side with the planes off, golden in bf16 and same_bits.py at 64 lanes (against the planes
# off) where time is left.
REPORT=planes.txt
source "$(dirname "$0")/call_start.sh"
i=0; P=()
for form in "MI=bf16" "MI=bf16 TF_CUDA_POISON_SHARED=1" "MI=f32" "MI=bf16 TF_CUDA_PLANES=0"; do
  i=$((i + 1))
  ( mi=${form#MI=}; mi=${mi%% *}; envs=${form#MI=$mi}
    echo "contract $form: $(env $envs timeout 150 "$B"/tf_kernel_contract --matmul-input "$mi" 2>&1 |
      grep -E 'SUMMARY|FAIL' | head -8)" > "$OUT/pl_form$i.txt" ) &
  P+=($!)
done
[ -x "$B"/tf_tests ] && ( echo "tf_tests MatmulInput on the card: $(TF_TEST_DEVICE=cuda timeout 150 "$B"/tf_tests --gtest_filter='MatmulInput.*' 2>&1 |
    grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure' | head -12 | tr '\n' ' ')" > "$OUT/pl_tests.txt" ) &
[ -x "$B"/tf_tests ] && P+=($!)
wait "${P[@]}"
cat "$OUT"/pl_form*.txt >> "$R"; [ -f "$OUT/pl_tests.txt" ] && cat "$OUT/pl_tests.txt" >> "$R"; el
wait $M32
ARMS=("planes|TF_CUDA_PLANES=|$B/tensorfold|" "off|TF_CUDA_PLANES=0|$B/tensorfold|")
OUT=$OUT bash tests/gpu/run_ab.sh llama3.1-8b "${BENCHES:---pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 --reps 2;--pp 512 --tg 64 --batch 64 --matmul-input bf16 --reps 2;--pp 64 --tg 64 --batch 16 --matmul-input bf16 --reps 2}" \
  "${ARMS[@]}" "${ARMS[@]}" > /dev/null
python3 tests/gpu/abparse.py "$OUT/ab_llama3.1-8b.txt" >> "$R" 2>&1; el
[ $(($(date +%s) - T0)) -gt ${GOLDEN_BY:-420} ] && echo "golden skipped: out of time" >> "$R" ||
  echo "golden bf16: $(MATMUL_INPUT=bf16 timeout 90 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -1)" >> "$R"
el
# Concurrent against alone (rounds of up to 64 rows read the planes, a lone row none), and against off.
if [ $(($(date +%s) - T0)) -lt ${SAME_BY:-440} ]; then
  [ -d /dev/shm/l4 ] || python3 scripts/make_random_model.py --shape llama3.1-8b --layers 4 --out /dev/shm/l4 > /dev/null 2>&1
  printf '#!/bin/sh\nTF_CUDA_PLANES=0 exec %s "$@"\n' "$PWD/$B/tensorfold" > /tmp/tf_planes_off; chmod +x /tmp/tf_planes_off
  echo "same_bits: $(TF_ARGS="--matmul-input bf16 --parallel 64 --context 8192" timeout 240 python3 tests/gpu/same_bits.py \
    /dev/shm/l4 "$PWD/$B/tensorfold" /tmp/tf_planes_off --requests 40 2>&1 | tail -1)" >> "$R"
else
  echo "same_bits skipped: out of time" >> "$R"
fi
el
cat "$R"
