#!/usr/bin/env bash
# TensorFold's server against llama.cpp's llama-server (issue 4): same random Llama-3.1-8B weights,
# same card, 64 concurrent streams of 512 prompt + 256 generated tokens, one server after the other.
#
#   tests/gpu/run_server_bench.sh prepare   HERE (needs the network): fetches the llama-cpp-python
#        0.3.36 sdist and packs its vendor/llama.cpp, without models/docs/tests/unused backends
#        (~9 MB), into .llamacpp/llama.cpp-src.tar.gz; adds /.llamacpp/ to .git/info/exclude.
#   tests/gpu/run_server_bench.sh gpu       ON THE DEVICE: builds llama-server (CUDA, sm_90a) into
#        build-llama-cuda and tensorfold into build-gpu, writes the model to /dev/shm (while the
#        builds run), converts it (bench/hf_to_gguf_llama.py), runs bench/bench_servers.py -n 64
#        -p 512 -g 256 with 64 lanes / slots each, writes $OUT/bench_servers.jsonl and the logs.
#        Every step is skipped when its output exists, so a rerun on a warm machine continues.
#   tests/gpu/run_server_bench.sh pack-llama   HERE: after a CUDA build of llama-server here
#        (build_llama's flags plus -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF, in $LLAMA_BUILD, default
#        build-llama-cuda), strips it into .llamacpp/llama-server-cuda.tar.xz, cut into parts of
#        20 MB (.llamacpp/part.N) when the whole would not fit one call's carry, and unpacks the gguf
#        package the converter needs into .llamacpp/pylib.
#   tests/gpu/run_server_bench.sh gpu-prebuilt   ON THE DEVICE: the same run from binaries built
#        here (see the mode's comment), for sessions whose device time cannot fit the builds.
#   tests/gpu/run_server_bench.sh tf-only   ON THE DEVICE: TensorFold alone ($TF_BIN, default
#        .gpubin/tensorfold), the same 64 streams; the model's tokenizer.json comes from
#        bench/synthetic_vocab.py, so neither llama.cpp nor the gguf package is needed. No ratio.
#   tests/gpu/run_server_bench.sh cpu-toy   HERE: the same chain at toy scale on the CPU
#        (tests/fixtures/golden/llama, -n 4 -p 32 -g 16, llama-server built with -DGGML_CUDA=OFF -j2).
#
# The `run` call for the next session (after `prepare` here; .devdeps carries the pcre2/utf8proc
# headers tensorfold's build uses, as for run_device.sh):
#   run(command="bash tests/gpu/run_server_bench.sh gpu", carry=[".llamacpp", ".devdeps"], timeout_s=600)
# From pack-llama's parts instead (three calls, each within the warm machine's idle window):
#   run(command="mkdir -p /tmp/llparts && cp .llamacpp/part.0 /tmp/llparts/", carry=[".llamacpp/part.0"])
#   run(command="mkdir -p /tmp/llparts && cp .llamacpp/part.1 /tmp/llparts/", carry=[".llamacpp/part.1"])
#   run(command="source tests/gpu/unpack.sh && bash tests/gpu/run_server_bench.sh gpu-prebuilt",
#       carry=[".gpubin/tensorfold.xz", ".gpubin/libpcre2-8.so.0", ".gpubin/libutf8proc.so.2",
#              ".llamacpp/part.2", ".llamacpp/pylib"], timeout_s=600)
# TF_ARGS adds tensorfold serve arguments (for example "--round-tokens 2048"); ARRIVAL_MS (tf-only)
# spaces the timed requests that many ms apart instead of sending them at once.
# Results: $OUT/bench_servers.jsonl (one JSON line per server, then the ratio line), steps.log
# (timings of each step), build/convert/server logs. If the call runs out of time, the same call
# again on the still-warm machine skips what is done.
set -u
MODE=${1:-gpu}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
SRC_TGZ=.llamacpp/llama.cpp-src.tar.gz
START=$(date +%s)
step() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$OUT/steps.log"; }

prepare() {
  local tmp; tmp=$(mktemp -d)
  pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: -d "$tmp" >/dev/null || exit 1
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp" || exit 1
  mkdir -p .llamacpp
  local ex=() b
  for b in models docs media benches tests gguf-py tools/ui/src tools/ui/tests tools/server/tests \
           ggml/src/ggml-{sycl,vulkan,opencl,hexagon,metal,cann,musa,hip,et,webgpu,zdnn,zendnn,openvino,virtgpu,rpc}; do
    ex+=(--exclude="llama.cpp/$b")
  done
  tar czf "$SRC_TGZ" -C "$tmp"/llama_cpp_python-0.3.36/vendor "${ex[@]}" llama.cpp || exit 1
  rm -rf "$tmp"
  grep -qx '/.llamacpp/' .git/info/exclude 2>/dev/null || echo '/.llamacpp/' >> .git/info/exclude
  ls -la "$SRC_TGZ"
}

# build_llama BUILD_DIR JOBS CMAKE_ARGS...: llama-server from the packed sources.
build_llama() {
  local dir=$1 jobs=$2; shift 2
  [ -x "$dir/bin/llama-server" ] && { step "llama-server already built in $dir"; return 0; }
  [ -f "$SRC_TGZ" ] || { step "missing $SRC_TGZ: run '$0 prepare' first and carry .llamacpp"; return 1; }
  mkdir -p "$dir" && tar xzf "$SRC_TGZ" -C "$dir" || return 1
  cmake -S "$dir/llama.cpp" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF "$@" &&
    cmake --build "$dir" --target llama-server -j"$jobs"
}

devdeps() {
  [ -d .devdeps/root ] || return 0
  local D=$PWD/.devdeps/root/usr
  sed -i "s|^prefix=.*|prefix=$D|" $D/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig CPATH=$D/include${CPATH:+:$CPATH}
  export CMAKE_PREFIX_PATH=$D
}

case "$MODE" in
prepare)
  prepare ;;
pack-llama)
  B=${LLAMA_BUILD:-build-llama-cuda}
  [ -x "$B/bin/llama-server" ] || { echo "pack-llama: no $B/bin/llama-server" >&2; exit 1; }
  tmp=$(mktemp -d); mkdir -p "$tmp/lsrv" .llamacpp
  cp "$B/bin/llama-server" "$tmp/lsrv/" && strip "$tmp/lsrv/llama-server" || exit 1
  tar cJf .llamacpp/llama-server-cuda.tar.xz -C "$tmp" lsrv || exit 1
  rm -rf "$tmp" .llamacpp/part.*
  if [ "$(stat -c %s .llamacpp/llama-server-cuda.tar.xz)" -gt 20000000 ]; then
    split -b 20000000 -d -a 1 .llamacpp/llama-server-cuda.tar.xz .llamacpp/part.
    rm .llamacpp/llama-server-cuda.tar.xz
  fi
  if [ ! -d .llamacpp/pylib ]; then
    tmp=$(mktemp -d)
    pip download gguf --no-deps -d "$tmp" > /dev/null && python3 -m zipfile -e "$tmp"/gguf-*.whl .llamacpp/pylib
    rm -rf "$tmp"
  fi
  grep -qx '/.llamacpp/' .git/info/exclude 2>/dev/null || echo '/.llamacpp/' >> .git/info/exclude
  ls -la .llamacpp ;;
gpu)
  devdeps
  [ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
  MODEL=/dev/shm/l8b; GGUF=/dev/shm/l8b.gguf
  step "start: $(cat "$OUT/gpu.txt"); /dev/shm: $(df -h /dev/shm | tail -1)"
  ( build_llama build-llama-cuda 16 -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/build_llama.log" 2>&1
    step "llama-server build rc=$?" ) &
  ( { [ -x build-gpu/tensorfold ] || { cmake -S . -B build-gpu -G Ninja -DTF_CUDA=ON -DTF_TESTS=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release && ninja -C build-gpu -j16 tensorfold; }; } \
        > "$OUT/build_tf.log" 2>&1
    step "tensorfold build rc=$?" ) &
  ( if [ ! -f "$MODEL/config.json" ]; then
      python3 scripts/make_random_model.py --shape llama3.1-8b --out "$MODEL" > "$OUT/make_model.log" 2>&1
      step "random model rc=$?"
    fi
    if [ ! -f "$GGUF" ]; then
      python3 bench/hf_to_gguf_llama.py "$MODEL" "$GGUF" --hf-tokenizer > "$OUT/convert.log" 2>&1
      step "convert rc=$? $(tail -1 "$OUT/convert.log")"
    fi ) &
  wait
  [ -x build-llama-cuda/bin/llama-server ] || { tail -30 "$OUT/build_llama.log"; exit 1; }
  [ -x build-gpu/tensorfold ] || { tail -30 "$OUT/build_tf.log"; exit 1; }
  [ -f "$GGUF" ] || { tail -5 "$OUT/make_model.log" "$OUT/convert.log"; exit 1; }
  step "bench start"
  timeout 420 python3 bench/bench_servers.py --tf-bin build-gpu/tensorfold --tf-model "$MODEL" --device cuda \
    --llama-bin build-llama-cuda/bin/llama-server --llama-gguf "$GGUF" "--llama-args=-ngl 999" \
    "--tf-args=${TF_ARGS:-}" \
    -n 64 -p 512 -g 256 --rounds 2 --check-prompts 4 --check-tokens 64 \
    --json-out "$OUT/bench_servers.jsonl" --logs-dir "$OUT" 2> "$OUT/bench_servers.err"
  step "bench rc=$?"
  tail -5 "$OUT/bench_servers.err"; cat "$OUT/steps.log" ;;
gpu-prebuilt)
  # As gpu, from binaries built elsewhere: $TF_BIN (default .gpubin/tensorfold, its libraries beside
  # it) and pack-llama's llama-server tarball, with .llamacpp/pylib (the gguf package, which the
  # card lacks) put on PYTHONPATH. A call carries at most 64 MiB with the tracked tree, so a
  # tarball in parts comes over back-to-back calls on the still-warm machine: the first copies its
  # parts to /tmp/llparts, the last carries the rest and runs this.
  TF_BIN=${TF_BIN:-.gpubin/tensorfold}
  MODEL=/dev/shm/l8b; GGUF=/dev/shm/l8b.gguf; LS=/tmp/lsrv
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
  step "start: $(cat "$OUT/gpu.txt")"
  # Parts that earlier calls left in /tmp/llparts (`cp .llamacpp/part.* /tmp/llparts/`) join this
  # call's own.
  if [ ! -f .llamacpp/llama-server-cuda.tar.xz ]; then
    : > /tmp/llama-server-cuda.tar.xz
    for i in 0 1 2 3 4 5 6 7 8 9; do
      part=.llamacpp/part.$i; [ -f "$part" ] || part=/tmp/llparts/part.$i
      [ -f "$part" ] || break
      cat "$part" >> /tmp/llama-server-cuda.tar.xz
    done
  else
    cp .llamacpp/llama-server-cuda.tar.xz /tmp/
  fi
  tar xJf /tmp/llama-server-cuda.tar.xz -C /tmp || { step "llama-server tarball incomplete"; exit 1; }
  [ -d .llamacpp/pylib ] && export PYTHONPATH=$PWD/.llamacpp/pylib${PYTHONPATH:+:$PYTHONPATH}
  export LD_LIBRARY_PATH=$(dirname "$TF_BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for lib in $(ldd "$LS/llama-server" | awk '/not found/ {print $1}'); do
    found=$(find / -name "$lib" -not -path '/proc/*' 2>/dev/null | head -1)
    [ -n "$found" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
    step "library $lib: ${found:-missing}"
  done
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$LS
  ldd "$LS/llama-server" | grep "not found" && exit 1
  if [ ! -f "$MODEL/config.json" ]; then
    python3 scripts/make_random_model.py --shape llama3.1-8b --out "$MODEL" > "$OUT/make_model.log" 2>&1
    step "random model rc=$?"
  fi
  if [ ! -f "$GGUF" ]; then
    python3 bench/hf_to_gguf_llama.py "$MODEL" "$GGUF" --hf-tokenizer > "$OUT/convert.log" 2>&1
    step "convert rc=$? $(tail -1 "$OUT/convert.log")"
  fi
  timeout "${BENCH_TIMEOUT:-420}" python3 bench/bench_servers.py --tf-bin "$TF_BIN" --tf-model "$MODEL" --device cuda \
    --llama-bin "$LS/llama-server" --llama-gguf "$GGUF" "--llama-args=-ngl 999" \
    "--tf-args=${TF_ARGS:-}" \
    -n 64 -p 512 -g 256 --rounds "${ROUNDS:-2}" --check-prompts 4 --check-tokens 64 \
    --json-out "$OUT/bench_servers.jsonl" --logs-dir "$OUT" 2> "$OUT/bench_servers.err"
  step "bench rc=$?"
  tail -8 "$OUT/bench_servers.err"; cat "$OUT/bench_servers.jsonl"; cat "$OUT/steps.log" ;;
tf-only)
  TF_BIN=${TF_BIN:-.gpubin/tensorfold}
  MODEL=/dev/shm/l8b
  export LD_LIBRARY_PATH=$(dirname "$TF_BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
  step "start: $(cat "$OUT/gpu.txt")"
  if [ ! -f "$MODEL/config.json" ]; then
    python3 scripts/make_random_model.py --shape llama3.1-8b --out "$MODEL" > "$OUT/make_model.log" 2>&1
    step "random model rc=$?"
  fi
  python3 bench/synthetic_vocab.py "$MODEL" || exit 1
  timeout "${BENCH_TIMEOUT:-300}" python3 bench/bench_servers.py --tf-bin "$TF_BIN" --tf-model "$MODEL" --device cuda \
    --order tensorfold "--tf-args=${TF_ARGS:-}" --arrival-ms "${ARRIVAL_MS:-0}" \
    -n 64 -p 512 -g 256 --rounds "${ROUNDS:-2}" --check-prompts 4 --check-tokens 64 \
    --json-out "$OUT/bench_servers.jsonl" --logs-dir "$OUT" 2> "$OUT/bench_servers.err"
  step "bench rc=$?"
  tail -8 "$OUT/bench_servers.err"; cat "$OUT/bench_servers.jsonl"; cat "$OUT/steps.log" ;;
cpu-toy)
  LLAMA_BIN=${LLAMA_BIN:-build-llama-cpu/bin/llama-server}
  [ -x "$LLAMA_BIN" ] || build_llama build-llama-cpu 2 -DGGML_CUDA=OFF > "$OUT/build_llama_cpu.log" 2>&1 ||
    { tail -20 "$OUT/build_llama_cpu.log"; exit 1; }
  TF_BIN=${TF_BIN:-build/tensorfold}
  TOY=$(mktemp -d); cp tests/fixtures/golden/llama/config.json tests/fixtures/golden/llama/model.safetensors "$TOY"/
  python3 bench/hf_to_gguf_llama.py "$TOY" "$TOY/model.gguf" --hf-tokenizer || exit 1
  timeout 170 python3 bench/bench_servers.py --tf-bin "$TF_BIN" --tf-model "$TOY" --device cpu "--tf-args=--threads 1" \
    --llama-bin "$LLAMA_BIN" --llama-gguf "$TOY/model.gguf" "--llama-args=-t 1 -ngl 0" \
    -n 4 -p 32 -g 16 --check-prompts 4 --json-out "$OUT/bench_servers_toy.jsonl" --logs-dir "$OUT"
  rc=$?; rm -rf "$TOY"; exit $rc ;;
*)
  echo "usage: $0 prepare|pack-llama|gpu|gpu-prebuilt|tf-only|cpu-toy" >&2; exit 2 ;;
esac
