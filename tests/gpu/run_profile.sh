#!/usr/bin/env bash
# Per-op device time of the bench phases (tensorfold bench --profile) on random-weight models of
# real shapes, one log per shape in $OUT.
#   tests/gpu/run_profile.sh SHAPE[:LAYERS[:sparse]] ...     binary: $BIN (default build-gpu/tensorfold)
# LONG=1 adds a 32k-token prefill (no profile); NOPROFILE=1 times without the profile (best of 2).
set -u
OUT=${OUT:-gpu-out}; BIN=${BIN:-build-gpu/tensorfold}; mkdir -p "$OUT"
for spec in "$@"; do
  IFS=: read -r shape layers sparse <<< "$spec"
  dir=/dev/shm/$shape log=$OUT/prof_$shape.txt
  python3 scripts/make_random_model.py --shape "$shape" ${layers:+--layers "$layers"} ${sparse:+--sparse} \
    --out "$dir" > "$log" 2>&1
  python3 bench/active_bytes.py "$dir" >> "$log" 2>&1
  prof=--profile
  [ -n "${NOPROFILE:-}" ] && prof="--reps 2"
  for args in "--pp 512 --tg 64 --batch 1" "--pp 4096 --tg 2 --batch 1" "--pp 16 --tg 32 --batch 8,64"; do
    echo "== bench $args" >> "$log"
    # shellcheck disable=SC2086
    timeout 150 "$BIN" bench --model "$dir" --device cuda $args $prof --json >> "$log" 2>&1
  done
  if [ -n "${LONG:-}" ]; then
    echo "== bench --pp 32768 --tg 2 --batch 1" >> "$log"
    timeout 200 "$BIN" bench --model "$dir" --device cuda --pp 32768 --tg 2 --batch 1 --json >> "$log" 2>&1
  fi
  rm -rf "$dir"
  grep -E '^\{|ms wall|GPU op time' "$log"
done
