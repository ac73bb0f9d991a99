#!/usr/bin/env bash
# Installs, builds and runs every test: the C++ unit tests (ctest) and the Python
# integration tests (pytest against the built binary).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --python
bash scripts/build.sh
jobs=$(nproc)
(cd build && ctest --output-on-failure -j "$jobs" --timeout 600)
export TF_BIN="$PWD/build/tensorfold"
set +e
.venv/bin/python -m pytest -q tests/python
rc=$?
set -e
# pytest exits 5 when it collected nothing; that is not a failure of the suite itself.
if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then exit $rc; fi
