# Sourced first by the one-call device scripts, with REPORT set (a file name): sets OUT, B (the
# binaries' folder), R (the report, begun with the card's name and driver), T0 and el (appends the
# seconds since T0 to R), and starts writing the random Llama-3.1-8B to /dev/shm in the background
# where it is missing (M32, its pid).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
B=${BIN_DIR:-.gpubin}
R=$OUT/$REPORT
T0=$(date +%s)
el() { echo "t=$(($(date +%s) - T0))s" >> "$R"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R"
[ -f /dev/shm/llama3.1-8b/config.json ] ||
  python3 scripts/make_random_model.py --shape llama3.1-8b --out /dev/shm/llama3.1-8b > /dev/null 2>&1 &
M32=$!

# The checks the packed binaries allow, run at once and appended to R: the contract under each
# form ("MODE [ENV=V ...]", e.g. "bf16 TF_CUDA_POISON_SHARED=1") and tf_tests with the filter.
#   card_checks FILTER FORM...
card_checks() {
  local filter=$1 i=0 pids=()
  shift
  rm -f "$OUT"/check_*.txt
  if [ -x "$B"/tf_kernel_contract ]; then
    for form in "$@"; do
      i=$((i + 1))
      ( mi=${form%% *}; envs=${form#"$mi"}
        # shellcheck disable=SC2086
        echo "contract $form: $(env $envs timeout 240 "$B"/tf_kernel_contract --matmul-input "$mi" 2>&1 |
          grep -E 'SUMMARY|FAIL' | head -8)" > "$OUT/check_$i.txt" ) &
      pids+=($!)
    done
  fi
  if [ -x "$B"/tf_tests ]; then
    ( echo "tf_tests on the card: $(TF_TEST_DEVICE=cuda timeout 240 "$B"/tf_tests --gtest_brief=1 --gtest_filter="$filter" 2>&1 |
        grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure' | head -12 | tr '\n' ' ')" > "$OUT/check_tests.txt" ) &
    pids+=($!)
  fi
  [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
  cat "$OUT"/check_*.txt >> "$R" 2> /dev/null
  el
}

# Writes 8 layers of each named shape's random sparse weights to /dev/shm in the background where
# missing; MK is the writer's pid.
#   make_models SHAPE...
make_models() {
  ( for s in "$@"; do
      [ -d "/dev/shm/$s" ] || python3 scripts/make_random_model.py --shape "$s" --layers 8 --sparse --out "/dev/shm/$s"
    done ) > /dev/null 2>&1 &
  MK=$!
}

# Decode tok/s at batch 1 of a model make_models wrote, with the given environment words.
#   tps SHAPE "ENV=V ..." [BENCH ARGS...]
tps() {
  local s=$1 envs=$2
  shift 2
  # shellcheck disable=SC2086
  env $envs timeout 60 "$B"/tensorfold bench --model /dev/shm/$s --device cuda --pp 16 --tg 64 --batch 1 \
    --matmul-input bf16 "$@" --json 2> /dev/null | grep -o '"tg_tps": [0-9.]*' | grep -o '[0-9.]*$'
}
