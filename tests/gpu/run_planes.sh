#!/usr/bin/env bash
# Checks and timings of the bf16 planes that norms and act_mul leave for the next matmul (bf16 mode;
# TF_CUDA_PLANES=0 turns them off) on a card, in one call of a few minutes. Binaries built here come
# in by tests/gpu/pack.sh (PACK="tensorfold tf_kernel_contract", and tf_tests where the tree has room):
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_planes.sh", carry=[".gpubin"])
# Writes $OUT/planes.txt: the contract in bf16 (plain, poisoned) and at f32, the MatmulInput tests on
# the card (where packed), prefill of 4,096 and decode rounds of 16 and 64 rows side by side with the planes off,
# golden in bf16 where time is left.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
B=${BIN_DIR:-.gpubin}
R=$OUT/planes.txt
T0=$(date +%s)
el() { echo "t=$(($(date +%s) - T0))s" >> "$R"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R"
[ -f /dev/shm/llama3.1-8b/config.json ] ||
  python3 scripts/make_random_model.py --shape llama3.1-8b --out /dev/shm/llama3.1-8b > /dev/null 2>&1 &
M32=$!
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
for pl in "" 0; do
  [ $(($(date +%s) - T0)) -gt ${GOLDEN_BY:-420} ] && { echo "golden TF_CUDA_PLANES=$pl skipped: out of time" >> "$R"; continue; }
  echo "golden bf16 TF_CUDA_PLANES=$pl: $(TF_CUDA_PLANES=$pl MATMUL_INPUT=bf16 timeout 90 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -1)" >> "$R"
done; el
cat "$R"
