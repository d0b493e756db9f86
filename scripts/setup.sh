#!/usr/bin/env bash
# Create .venv and install lmve with CPU torch pinned (constraints.txt). Idempotent: it
# reinstalls only when pyproject.toml or constraints.txt changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.lmve-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[train,dev,bench]"
  echo "$want" > "$stamp"
fi
