#!/usr/bin/env bash
# Where a 64-stream decode round goes, in one device call, from prebuilt binaries ($BIN_DIR,
# default .gpubin, see tests/gpu/pack.sh): the bench's decode at the server's depth (64 lanes,
# 512-token prompts, 256 steps) with --profile, then a server under the same load
# (bench/bench_servers.py) with TF_CUDA_PROFILE=1, whose per-op table comes at its exit. The two
# tables side by side show whether the server's rounds cost what the bench's do, and where.
#   source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_round_profile.sh
# MODEL (default /dev/shm/llama3.1-8b, made when missing), TF_ARGS (default --matmul-input bf16),
# DEVICE (default cuda), PYTHON (default python3; bench_servers.py needs numpy and requests).
# Logs in $OUT.
set -u
OUT=${OUT:-gpu-out}; B=${BIN_DIR:-.gpubin}; M=${MODEL:-/dev/shm/llama3.1-8b}; DEV=${DEVICE:-cuda}
ARGS=${TF_ARGS:---matmul-input bf16}; PORT=${PORT:-18099}
mkdir -p "$OUT"
[ -f "$M/config.json" ] || python3 scripts/make_random_model.py --shape llama3.1-8b --out "$M" > "$OUT/make_model.log" 2>&1 ||
  { tail -5 "$OUT/make_model.log"; exit 1; }
python3 bench/synthetic_vocab.py "$M" > /dev/null || exit 1
case "$B" in /*) lib=$B ;; *) lib=$PWD/$B ;; esac
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck disable=SC2086
timeout 300 "$B"/tensorfold bench --model "$M" --device "$DEV" --pp 512 --depth 513 --chunk 512 --tg 256 --batch 64 \
  $ARGS --profile > "$OUT/bench_depth.log" 2>&1
# shellcheck disable=SC2086
TF_CUDA_PROFILE=1 "$B"/tensorfold serve --model "$M" --device "$DEV" --parallel 64 --context 768 --port "$PORT" \
  $ARGS > "$OUT/server.log" 2>&1 &
pid=$!
for _ in $(seq 180); do curl -s "localhost:$PORT/health" | grep -q ok && break; sleep 1; done
vocab=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$M/config.json")
timeout 300 "${PYTHON:-python3}" bench/bench_servers.py --tf-url "http://127.0.0.1:$PORT" --order tensorfold --vocab "$vocab" \
  -n 64 -p 512 -g 256 --rounds 1 --check-prompts 0 > "$OUT/bench_servers.jsonl" 2> "$OUT/bench_servers.err"
kill -TERM "$pid"; wait "$pid"
echo "== tensorfold bench, decode at depth 513 (per op: device us, host us)"
sed -n '/profile: decode/,/^batch/p' "$OUT/bench_depth.log" | head -16; tail -1 "$OUT/bench_depth.log"
echo "== the server's whole life (TF_CUDA_PROFILE), then its load"
grep -A16 'profile (TF_CUDA_PROFILE)' "$OUT/server.log"
grep '"server"' "$OUT/bench_servers.jsonl"
