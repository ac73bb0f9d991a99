#!/bin/sh
# Builds tf_kernel_contract with nvcc alone (no CMake configure, none of the server's
# libraries), for GPU machines that lack the project's -dev packages. Run from the repo root:
#   sh tests/cuda/build_direct.sh OUT_DIR [ARCH_GENCODE]
set -e
out=${1:-build-direct}
gen=${2:--gencode=arch=compute_90a,code=sm_90a}
mkdir -p "$out"
host="-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-ffp-contract=off,-fno-fast-math"
objs=""
for f in src/base/*.cpp src/backend/backend.cpp src/backend/sampling.cpp src/backend/cpu/*.cpp; do
  o="$out/$(echo "$f" | tr / _).o"
  case "$f" in *_avx2.cpp) extra="-mavx2 -mfma -mf16c" ;; *) extra="" ;; esac
  g++ -std=c++20 -O3 -DTF_X86=1 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-fast-math $extra -Isrc -c "$f" -o "$o" &
  objs="$objs $o"
done
wait
for f in src/backend/cuda/*.cu; do
  o="$out/$(echo "$f" | tr / _).o"
  nvcc -std=c++20 -O3 --fmad=false $gen $host -Isrc -c "$f" -o "$o" &
  objs="$objs $o"
done
for f in tests/cuda/*.cu tests/cuda/*.cpp; do
  o="$out/$(echo "$f" | tr / _).o"
  nvcc -std=c++20 -O3 $gen $host -DTF_X86=1 -Isrc -x cu -c "$f" -o "$o" &
  objs="$objs $o"
done
wait
nvcc $gen $objs -o "$out/tf_kernel_contract" -lpthread
echo "built $out/tf_kernel_contract"
