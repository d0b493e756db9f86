#!/usr/bin/env bash
# One command from a fresh clone to a running service on the embedded synthetic default:
# venv + install (CPU torch), train the synthetic bundle if there is none, serve on :8000.
# Environment: LMVE_BUNDLE (serve this bundle instead), LMVE_HOST, LMVE_PORT, LMVE_API_KEY, ...
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bundle="${LMVE_BUNDLE:-artifacts/synthetic/bundle}"
if [ ! -f "$bundle/manifest.json" ]; then
  echo "no bundle at $bundle: training the synthetic default (about 30 s)..."
  .venv/bin/lmve-train --dataset synthetic --out "$(dirname "$bundle")"
fi
exec .venv/bin/lmve-serve --bundle "$bundle" --host "${LMVE_HOST:-127.0.0.1}" --port "${LMVE_PORT:-8000}"
