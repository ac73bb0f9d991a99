#!/usr/bin/env bash
# One device session for the hybrid models: build with CUDA and the unit tests, run the kernel
# contract, the model tests on the GPU (TF_TEST_DEVICE=cuda), the GPU golden check, and the
# speed benchmarks on random weights of real hybrid shapes beside transformers. Logs go to $OUT.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
LAYERS_NEMO=${LAYERS_NEMO:-40}; LAYERS_QNEXT=${LAYERS_QNEXT:-12}
if [ -d .devdeps/root ]; then
  D=$PWD/.devdeps/root/usr
  sed -i "s|^prefix=.*|prefix=$D|" $D/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig CPATH=$D/include${CPATH:+:$CPATH}
  export CMAKE_PREFIX_PATH=$D
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
{ cmake -S . -B build-gpu -G Ninja -DTF_CUDA=ON -DTF_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release &&
  ninja -C build-gpu tensorfold tf_kernel_contract tf_tests; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
{
  ./build-gpu/tf_kernel_contract 2>&1 | grep -E "SUMMARY|FAIL" | head -20
  TF_TEST_DEVICE=cuda timeout 300 ./build-gpu/tf_tests --gtest_brief=1 \
    --gtest_filter='Golden*:Recurrent*:Invariance*:PromptCache*:SiblingGroup*' 2>&1 | tail -25
  timeout 300 python3 tests/gpu/golden_gpu.py build-gpu/tensorfold 2>&1 | tail -8
} > "$OUT/exactness.log" 2>&1
cat "$OUT/exactness.log"
bench() {  # shape layers tag
  local dir=/dev/shm/$1
  python3 scripts/make_random_model.py --shape "$1" --layers "$2" --out "$dir" > /dev/null 2>&1 || { echo "make $1 failed"; return; }
  python3 bench/active_bytes.py "$dir"
  timeout 240 ./build-gpu/tensorfold bench --model "$dir" --device cuda --pp 4096 --tg 64 --batch 1 --json 2>&1 | tail -2
  timeout 120 ./build-gpu/tensorfold bench --model "$dir" --device cuda --pp 16 --tg 64 --batch 64 --json 2>&1 | tail -2
  timeout 150 ./build-gpu/tensorfold bench --model "$dir" --device cuda --pp 32768 --tg 2 --batch 1 --json 2>&1 | tail -2
  timeout 240 python3 bench/bench_hf.py --model "$dir" --pp 4096 --tg 32 2>&1 | tail -1
  rm -rf "$dir"
}
{ bench nemotron-3-nano-30b-a3b "$LAYERS_NEMO"; bench qwen3-next-80b-a3b "$LAYERS_QNEXT"; } > "$OUT/bench_hybrid.jsonl" 2>&1
cat "$OUT/bench_hybrid.jsonl"
