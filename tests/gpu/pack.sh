#!/usr/bin/env bash
# Packs GPU binaries built here for a device call (no CUDA build on the card):
#   tests/gpu/pack.sh [BUILD_DIR]          (default build-cuda: -DTF_CUDA=ON -DTF_TESTS=ON, 90a)
# writes .gpubin/NAME.xz, stripped, for NAME in $PACK (default: tensorfold tf_kernel_contract tf_tests)
# and the shared libraries they need beyond the card's system (libutf8proc, libpcre2), and keeps
# .gpubin out of git. On the card, `source tests/gpu/unpack.sh` first; then run with
#   run(command="source tests/gpu/unpack.sh && BIN_DIR=.gpubin OUT=$OUT bash tests/gpu/run_checks.sh",
#       carry=[".gpubin"])
# tf_tests finds its fixtures under the path it was built in; unpack.sh links it when missing.
# A default build embeds each kernel's PTX beside its sm_90a SASS, and that PTX is most of the xz
# bytes: from a SASS-only build all three binaries travel (9 MiB against 16 for two), with the
# same sm_90a code the card runs from a default build (its functions report their PTX version, so
# the cluster launches run as they do there):
#   cmake -S . -B build-cuda-pack -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=ON -DTF_TESTS=ON \
#     -DCMAKE_CUDA_ARCHITECTURES=90a-real && ninja -C build-cuda-pack && tests/gpu/pack.sh build-cuda-pack
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cuda}
[ -x "$B/tensorfold" ] || { echo "pack: no $B/tensorfold (build with -DTF_CUDA=ON first)" >&2; exit 1; }
mkdir -p .gpubin .git/info
grep -qx '/.gpubin/' .git/info/exclude 2>/dev/null || echo '/.gpubin/' >> .git/info/exclude
# Stripped and squeezed hard: the tree, tracked files included, travels within 64 MiB.
for b in ${PACK:-tensorfold tf_kernel_contract tf_tests}; do
  [ -x "$B/$b" ] || { echo "pack: no $B/$b" >&2; continue; }
  strip -o ".gpubin/$b.tmp" "$B/$b"
  xz -T0 -9 -c ".gpubin/$b.tmp" > ".gpubin/$b.xz"
  rm -f ".gpubin/$b.tmp" ".gpubin/$b"
done
for lib in $(ldd "$B/tensorfold" | awk '/libutf8proc|libpcre2/ {print $3}'); do cp -L "$lib" .gpubin/; done
echo "$PWD" > .gpubin/built_in
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
packed=$(du -sb .gpubin | cut -f1)
total=$(((tracked + packed) / 1048576))
echo "pack: .gpubin $((packed / 1048576)) MiB, with the tracked files $total of 64 MiB"
# A tree of 63.6 MiB by this count was refused as over the limit.
[ "$total" -lt 60 ] || echo "pack: near the limit; pack from a SASS-only build (above) or fewer binaries" >&2
