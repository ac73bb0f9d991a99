#!/usr/bin/env bash
# Packs GPU binaries built here for a device call (no CUDA build on the card):
#   tests/gpu/pack.sh [BUILD_DIR]          (default build-cuda: -DTF_CUDA=ON -DTF_TESTS=ON, 90a)
# writes .gpubin/{tensorfold,tf_kernel_contract,tf_tests,tf_probe_tensor_cores,tf_trial_*}.xz (those built)
# and the shared libraries they need beyond the card's system (libutf8proc, libpcre2), and keeps
# .gpubin out of git. On the card, `source tests/gpu/unpack.sh` first; then run with
#   run(command="source tests/gpu/unpack.sh && BIN_DIR=.gpubin OUT=$OUT bash tests/gpu/run_checks.sh",
#       carry=[".gpubin"])
# tf_tests finds its fixtures under the path it was built in; unpack.sh links it when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cuda}
[ -x "$B/tensorfold" ] || { echo "pack: no $B/tensorfold (build with -DTF_CUDA=ON first)" >&2; exit 1; }
mkdir -p .gpubin
grep -qx '/.gpubin/' .git/info/exclude 2>/dev/null || echo '/.gpubin/' >> .git/info/exclude
for b in tensorfold tf_kernel_contract tf_tests tf_probe_tensor_cores tf_trial_decode_wgmma; do
  [ -x "$B/$b" ] && xz -T0 -1 -c "$B/$b" > ".gpubin/$b.xz"
done
for lib in $(ldd "$B/tensorfold" | awk '/libutf8proc|libpcre2/ {print $3}'); do cp -L "$lib" .gpubin/; done
echo "$PWD" > .gpubin/built_in
du -sh .gpubin
