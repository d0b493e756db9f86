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
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[train,dev,docs,postgres,dask]"
  # the bench extra (Dask, and MAPIE 1.6 for the peer method mapie-mvsr) is optional: where the
  # package index lacks MAPIE, Dask alone is installed, python -m benchmarks.bench --methods mapie-mvsr says what is
  # missing and the peer's tests are skipped
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[bench]" || {
    echo "setup: the bench extra (MAPIE 1.6) could not be installed; installing Dask alone" >&2
    .venv/bin/python -m pip install -q -c constraints.txt "dask[distributed]>=2024.1"
  }
  echo "$want" > "$stamp"
fi
