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
