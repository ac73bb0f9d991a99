#!/usr/bin/env bash
# Device runs for the hybrid models. Logs go to $OUT; the build goes to $BUILD (default build-gpu).
#   tests/gpu/run_hybrid.sh exact          build with CUDA and the unit tests, run the kernel contract,
#                                          the model tests on the GPU (TF_TEST_DEVICE=cuda) and the
#                                          GPU golden check on the hybrid fixtures
#   tests/gpu/run_hybrid.sh bench SHAPE N [sparse]
#                                          random weights of SHAPE's first N layers in /dev/shm
#                                          (sparse: zero holes but norms, embeddings and routers, so
#                                          a full-depth model fits): bound, our prefill 4k/32k and
#                                          decode 1/64, transformers beside
set -u
OUT=${OUT:-gpu-out}; BUILD=${BUILD:-build-gpu}; mkdir -p "$OUT"
if [ -d .devdeps/root ]; then
  D=$PWD/.devdeps/root/usr
  sed -i "s|^prefix=.*|prefix=$D|" $D/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig CPATH=$D/include${CPATH:+:$CPATH}
  export CMAKE_PREFIX_PATH=$D
fi
build() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
  { cmake -S . -B "$BUILD" -G Ninja -DTF_CUDA=ON -DTF_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release &&
    ninja -C "$BUILD" tensorfold tf_kernel_contract tf_tests; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
}
case "${1:-exact}" in
exact)
  build
  {
    "$BUILD"/tf_kernel_contract 2>&1 | grep -E "SUMMARY|FAIL" | head -20
    TF_TEST_DEVICE=cuda timeout 300 "$BUILD"/tf_tests --gtest_brief=1 \
      --gtest_filter='*Golden*:*Recurrent*:*Invariance*:*PromptCache*:*SiblingGroup*' 2>&1 | tail -25
    timeout 240 python3 tests/gpu/golden_gpu.py "$BUILD"/tensorfold nemotron qwen3_next qwen3_5 2>&1 | tail -8
  } > "$OUT/exactness.log" 2>&1
  cat "$OUT/exactness.log" ;;
bench)
  [ -x "$BUILD"/tensorfold ] || build
  shape=$2; layers=$3; dir=/dev/shm/$shape; sparse=${4:+--sparse}
  {
    python3 scripts/make_random_model.py --shape "$shape" --layers "$layers" $sparse --out "$dir" 2>&1 | tail -1
    python3 bench/active_bytes.py "$dir"
    timeout 150 "$BUILD"/tensorfold bench --model "$dir" --device cuda --pp 4096 --tg 64 --batch 1 --json 2>&1 | tail -2
    timeout 100 "$BUILD"/tensorfold bench --model "$dir" --device cuda --pp 16 --tg 64 --batch 64 --json 2>&1 | tail -2
    timeout 120 "$BUILD"/tensorfold bench --model "$dir" --device cuda --pp 32768 --tg 2 --batch 1 --json 2>&1 | tail -2
    timeout 180 python3 bench/bench_hf.py --model "$dir" --pp 4096 --tg 16 2>&1 | tail -1
  } > "$OUT/bench_$shape.jsonl" 2>&1
  rm -rf "$dir"
  cat "$OUT/bench_$shape.jsonl" ;;
esac
