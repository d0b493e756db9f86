#!/usr/bin/env bash
# Set up (if needed), check the import contracts (pyproject.toml [tool.importlinter]: the arrows of
# docs/concepts/architecture.md), and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/lint-imports --no-logo --cache-dir .venv/.import_linter_cache
exec .venv/bin/python -m pytest -q "$@"
