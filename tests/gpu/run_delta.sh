#!/usr/bin/env bash
# Checks and timings of the gated delta's tiled chunked form against the one-kernel form
# (TF_CUDA_DELTA_TILED=0), in one call of about four minutes:
#   run(command="source tests/gpu/unpack.sh && OUT=$OUT bash tests/gpu/run_delta.sh", carry=[".gpubin"])
# with PACK="tensorfold tf_kernel_contract". Writes $OUT/delta.txt as it goes: the contract's
# gated_delta cases in each form (their measured errors side by side: equal lines mean equal
# bits), the tiled form poisoned and at f32, the whole contract in bf16, then the prefill
# profiles of 8 layers of Qwen3-Next in each form, and Nsight Compute's time for each of the
# tiled form's two kernels where ncu is on the card. Variables: PROFILE_ENVS (the profiles'
# VAR=VALUE words, in order), EXTRA_FORMS (more contract forms), FULL_CONTRACT=0 (skip the whole
# contract), NCU_BEFORE (seconds after which ncu is skipped; 0 never runs it).
REPORT=delta.txt
source "$(dirname "$0")/call_start.sh"
kill "$M32" 2> /dev/null  # the dense Llama is not needed here
M=/dev/shm/qwen3-next-80b-a3b
make_models qwen3-next-80b-a3b
# EXTRA_FORMS: more forms, separated by ';' (e.g. "bf16 TF_CUDA_X=1;f32 TF_CUDA_X=1").
IFS=';' read -ra EXTRA <<< "${EXTRA_FORMS:-}"
FORMS=("bf16" "bf16 TF_CUDA_DELTA_TILED=0" "bf16 TF_CUDA_POISON_SHARED=1" "f32" ${EXTRA[@]+"${EXTRA[@]}"})
pids=()
for i in "${!FORMS[@]}"; do
  ( form=${FORMS[$i]}; mi=${form%% *}; envs=${form#"$mi"}
    # shellcheck disable=SC2086
    env $envs timeout 120 "$B"/tf_kernel_contract --matmul-input "$mi" --filter gated_delta > "$OUT/delta_form_$i.log" 2>&1
    echo "contract gated_delta $form: $(grep -E 'SUMMARY|FAIL' "$OUT/delta_form_$i.log" | head -6)" > "$OUT/delta_form_$i.txt" ) &
  pids+=($!)
done
[ "${FULL_CONTRACT:-1}" = 0 ] ||
  echo "contract bf16: $(timeout 150 "$B"/tf_kernel_contract --matmul-input bf16 2>&1 | grep -E 'SUMMARY|FAIL' | head -8)" >> "$R"
wait "${pids[@]}"
cat "$OUT"/delta_form_*.txt >> "$R"
for i in "${!FORMS[@]}"; do
  [ "$i" = 0 ] || [ "${FORMS[$i]%% *}" != bf16 ] && continue
  if diff <(grep measured "$OUT/delta_form_0.log") <(grep measured "$OUT/delta_form_$i.log") > /dev/null; then
    echo "measured lines of '${FORMS[0]}' and '${FORMS[$i]}': equal" >> "$R"
  else
    echo "measured lines of '${FORMS[0]}' and '${FORMS[$i]}' differ:" >> "$R"
    grep -h measured "$OUT/delta_form_0.log" "$OUT/delta_form_$i.log" | cut -c1-220 >> "$R"
  fi
done
el
wait $MK
for e in ${PROFILE_ENVS:-TF_CUDA_DELTA_TILED= TF_CUDA_DELTA_TILED=0 TF_CUDA_DELTA_TILED= TF_CUDA_DELTA_TILED=0}; do
  echo "== profile qwen3-next-80b-a3b $e --pp 4096: $(env "$e" timeout 60 "$B"/tensorfold bench --model $M --device cuda \
    --pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 --profile 2>&1 | sed -n '/profile: prefill/,/profile: decode/p' |
    grep -E 'ms wall|gated_delta' | tr -s ' ' | tr '\n' ' ')" >> "$R"
done
el
NCU=$(command -v ncu || find /usr/local -maxdepth 3 -path "*/bin/ncu" 2> /dev/null | head -1)
if [ -n "$NCU" ] && [ $(($(date +%s) - T0)) -lt ${NCU_BEFORE:-180} ]; then
  timeout 100 "$NCU" --section SpeedOfLight --section LaunchStats -k "regex:delta_tiled" --launch-count 2 \
    "$B"/tensorfold bench --model $M --device cuda --pp 4096 --chunk 4096 --tg 2 --batch 1 --matmul-input bf16 \
    > "$OUT/ncu.txt" 2>&1
  grep -E 'delta_tiled|Duration|Registers|Grid Size|Compute \(SM\) Throughput|Memory Throughput' "$OUT/ncu.txt" |
    head -20 >> "$R"
  el
fi
cat "$R"
