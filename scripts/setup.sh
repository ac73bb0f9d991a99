#!/usr/bin/env bash
# Installs what building and testing TensorFold needs on Debian 12 (run as root), then
# creates the Python environment for the integration tests in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libpcre2-dev libutf8proc-dev
      libboost-dev libcli11-dev libgtest-dev python3 python3-venv python3-pip)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" = "--python" ]; then
  if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv .venv 2>/dev/null || python3 -m venv .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
fi
