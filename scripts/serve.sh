#!/usr/bin/env bash
# The main job: install, build, and serve the built-in default model on 127.0.0.1:8080.
# Extra arguments go to `tensorfold serve` (e.g. --model PATH --port 9000 --parallel 8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec ./build/tensorfold serve "$@"
