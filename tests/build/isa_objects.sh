#!/usr/bin/env bash
# Fails when an object built for one CPU extension (the *_avx2 / *_avx512 / *vnni* kernels, picked
# at run time) has code that runs at program start: a static initializer there would execute
# AVX-512 or AVX2 instructions on every CPU, before any dispatch, and stop the program on CPUs
# without them.
#   tests/build/isa_objects.sh OBJECT_DIR
set -euo pipefail
dir=${1:?usage: isa_objects.sh OBJECT_DIR}
command -v nm > /dev/null || { echo "isa_objects: nm not found (binutils)" >&2; exit 1; }
mapfile -t objs < <(find "$dir" -name '*avx2.cpp.o' -o -name '*avx512.cpp.o' -o -name '*vnni*.cpp.o' | sort)
[ "${#objs[@]}" -gt 0 ] || { echo "isa_objects: no AVX2/AVX-512 objects under $dir" >&2; exit 1; }
bad=0
for o in "${objs[@]}"; do
  if nm "$o" | grep -E ' (_GLOBAL__sub_I_|_GLOBAL__I_)' > /dev/null || \
     readelf -S "$o" | grep -E '\.init_array' > /dev/null; then
    echo "isa_objects: $o runs code at program start"
    bad=1
  fi
done
echo "isa_objects: ${#objs[@]} objects checked"
exit $bad
