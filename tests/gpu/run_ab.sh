#!/usr/bin/env bash
# Side-by-side benches on one random-weight model of a real shape: every variant runs every
# bench in turn (interleaved, so drift hits all alike). A variant is "label|ENV=V ...|binary|extra
# bench arguments"; one JSON line per run, prefixed with its label, in $OUT/ab_SHAPE.txt.
#   tests/gpu/run_ab.sh SHAPE[:LAYERS[:sparse]] "BENCH ARGS;BENCH ARGS" VARIANT ...
# tests/gpu/abparse.py prints the runs as a table; binaries built here come in by tests/gpu/pack.sh.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
IFS=: read -r shape layers sparse <<< "$1"
IFS=';' read -r -a benches <<< "$2"
shift 2
dir=/dev/shm/$shape log=$OUT/ab_$shape.txt
[ -d "$dir" ] || python3 scripts/make_random_model.py --shape "$shape" ${layers:+--layers "$layers"} ${sparse:+--sparse} \
  --out "$dir" > "$log" 2>&1
for args in "${benches[@]}"; do
  for v in "$@"; do
    IFS='|' read -r label envs bin extra <<< "$v"
    # shellcheck disable=SC2086
    # One JSON line per batch size; each gets the label.
    env $envs timeout 200 "$bin" bench --model "$dir" --device cuda $args $extra --json 2>>"$log" | grep '^{' |
      sed "s/^/$label /" | tee -a "$log"
  done
done
