#!/usr/bin/env bash
# Checks and timings of the bf16 planes that the kernels writing a matmul's input leave for it (bf16
# mode; TF_CUDA_PLANES=0 turns them off) on a card, in one call of a few minutes. Binaries built here
# come in by tests/gpu/pack.sh: PACK="tensorfold tf_kernel_contract" or "tensorfold tf_tests" (the
# three do not fit one call's carry); each check runs where its binary came:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_planes.sh", carry=[".gpubin"])
# Writes $OUT/planes.txt: the contract in bf16 (plain, poisoned, planes off) and at f32; the
# MatmulInput, golden and hybrid tests on the card; golden in bf16; for each shape in AB_SHAPES
# (default llama3.1-8b; SHAPE[:LAYERS[:sparse]] as run_ab.sh takes) the BENCHES side by side with
# the planes off; same_bits.py at 64 lanes against the planes off, where time is left (SAME_BY s).
REPORT=planes.txt
source "$(dirname "$0")/call_start.sh"
card_checks 'MatmulInput.*:*Golden*:*Invariance*:*Graph*:*Moe*:*Recurrent*:*Nemotron*:*Qwen3Next*' \
  "bf16" "bf16 TF_CUDA_POISON_SHARED=1" "f32" "bf16 TF_CUDA_PLANES=0"
echo "golden bf16: $(MATMUL_INPUT=bf16 timeout 120 python3 tests/gpu/golden_gpu.py "$B"/tensorfold 2>&1 | tail -1)" >> "$R"; el
ARMS=("planes|TF_CUDA_PLANES=|$B/tensorfold|" "off|TF_CUDA_PLANES=0|$B/tensorfold|")
for shape in ${AB_SHAPES:-llama3.1-8b}; do
  [ "$shape" = llama3.1-8b ] && wait $M32
  OUT=$OUT bash tests/gpu/run_ab.sh "$shape" "${BENCHES:---pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 --reps 2;--pp 512 --tg 64 --batch 64 --matmul-input bf16 --reps 2;--pp 64 --tg 64 --batch 16 --matmul-input bf16 --reps 2}" \
    "${ARMS[@]}" "${ARMS[@]}" > /dev/null
  python3 tests/gpu/abparse.py "$OUT/ab_${shape%%:*}.txt" >> "$R" 2>&1; el
done
# Concurrent against alone (rounds of up to 64 rows read the planes, a lone row none), and against off.
if [ $(($(date +%s) - T0)) -lt ${SAME_BY:-300} ]; then
  [ -d /dev/shm/l4 ] || python3 scripts/make_random_model.py --shape llama3.1-8b --layers 4 --out /dev/shm/l4 > /dev/null 2>&1
  printf '#!/bin/sh\nTF_CUDA_PLANES=0 exec %s "$@"\n' "$PWD/$B/tensorfold" > /tmp/tf_planes_off; chmod +x /tmp/tf_planes_off
  echo "same_bits: $(TF_ARGS="--matmul-input bf16 --parallel 64 --context 8192" timeout 240 python3 tests/gpu/same_bits.py \
    /dev/shm/l4 "$PWD/$B/tensorfold" /tmp/tf_planes_off --requests 40 2>&1 | tail -1)" >> "$R"
else
  echo "same_bits skipped: out of time" >> "$R"
fi
el
cat "$R"
