#!/usr/bin/env bash
# One device session: build with CUDA, run the kernel contract, GPU golden and exactness checks,
# and the speed benchmarks. Logs go to $OUT (or ./gpu-out). Needs .devdeps (see docs).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if [ -d .devdeps/root ]; then
  D=$PWD/.devdeps/root/usr
  sed -i "s|^prefix=.*|prefix=$D|" $D/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig
  export CPATH=$D/include${CPATH:+:$CPATH}
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
{ cmake -S . -B build-gpu -G Ninja -DTF_CUDA=ON -DTF_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release &&
  ninja -C build-gpu tensorfold tf_kernel_contract; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
./build-gpu/tf_kernel_contract > "$OUT/contract.log" 2>&1; grep SUMMARY "$OUT/contract.log"
python3 tests/gpu/golden_gpu.py build-gpu/tensorfold > "$OUT/golden_gpu.log" 2>&1; tail -3 "$OUT/golden_gpu.log"
python3 scripts/make_random_model.py --shape llama3.1-8b --out /tmp/l8b > "$OUT/make_model.log" 2>&1
./build-gpu/tensorfold bench --model /tmp/l8b --device cuda --pp 512 --tg 64 --batch 1,8,64 --json > "$OUT/bench_llama8b.jsonl" 2> "$OUT/bench_llama8b.err"
cat "$OUT/bench_llama8b.jsonl"; tail -3 "$OUT/bench_llama8b.err"
