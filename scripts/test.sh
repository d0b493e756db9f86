#!/usr/bin/env bash
# Set up (if needed), check the import contracts (pyproject.toml [tool.importlinter]: the arrows of
# docs/concepts/architecture.md), and run the whole test suite, or with --quick the tests not marked
# slow (about a minute; benchmarks/results/suite_costs.md says what each part costs). Other arguments go to
# pytest: bash scripts/test.sh --quick tests/service -x
#
# pytest runs as a child of this script: SIGINT, SIGTERM or SIGHUP here is passed on to it as SIGTERM,
# which tests/processes.py turns into an interrupt that stops every server the tests started. What a run
# killed outright leaves is swept afterwards (python -m tests.processes sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
for a in "$@"; do
  if [ "$a" = "--quick" ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
bash scripts/setup.sh
.venv/bin/lint-imports --no-logo --cache-dir .venv/.import_linter_cache

# every process of the run inherits LMVE_TEST_RUN; the process groups it starts are listed in LMVE_TEST_GROUPS
export LMVE_TEST_RUN="$$.$(date +%s%N)"
LMVE_TEST_GROUPS=$(mktemp "${TMPDIR:-/tmp}/lmve-test-groups.XXXXXX")
export LMVE_TEST_GROUPS
pytest_pid= interrupted=0
forward() { interrupted=1; [ -z "$pytest_pid" ] || kill -TERM "$pytest_pid" 2>/dev/null || true; }
trap forward INT TERM HUP
.venv/bin/python -m pytest -q ${args[@]+"${args[@]}"} &
pytest_pid=$!
[ "$interrupted" = 0 ] || forward
status=0
wait "$pytest_pid" || status=$?
if [ "$interrupted" = 1 ]; then  # wait returned at the signal: give pytest a minute to stop what it started
  for _ in $(seq 60); do kill -0 "$pytest_pid" 2>/dev/null || break; sleep 1; done
  kill -KILL "$pytest_pid" 2>/dev/null || true
  wait "$pytest_pid" 2>/dev/null || true
  status=130
fi
# what a run that could not unwind (pytest killed outright) left running: said on stderr and stopped
.venv/bin/python -m tests.processes sweep || true
rm -f "$LMVE_TEST_GROUPS"
exit "$status"
