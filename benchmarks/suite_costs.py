"""What the test suite costs, test by test, and why: the full run CI makes and the ``--quick`` subset.

    python -m benchmarks.suite_costs [--skip-quick] [--top 25]

Runs ``bash scripts/test.sh`` (the whole suite, as CI does) with this module as a pytest plugin (``-p
benchmarks.suite_costs``), which records for every test's setup, call and teardown the wall time, the CPU
time of the pytest process (all its threads: fitting, statistics, in-process servers) and the CPU time of
its children that ended in that phase (``lmve-serve``, ``lmve-train``, Dask workers; counted when they are
reaped, so a module's server falls in the teardown that stops it; PostgreSQL, a daemon, in none). The wall
time left over is waiting: servers starting, sleeps, sockets. The setup of the first test that uses a module
or session fixture carries that fixture's cost (a training, a server start).

Then times ``bash scripts/test.sh --quick`` end to end (set-up check, import contracts, collection and the
tests not marked ``slow``) against its budget, 120 s on 2 cores (issue 75); the full suite's is CI's 10
minutes. Writes ``benchmarks/results/suite_costs.{json,md}`` with the command and commit. Run it alone: it
times things.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, command, commit, machine, utc_now, write_json, write_text

OUT_ENV = "LMVE_SUITE_COSTS_OUT"
BUDGETS = {"quick": 120.0, "full": 600.0}  # seconds: issue 75's quick run; CI's full suite
PHASES = ("setup", "call", "teardown")

# ---------------------------------------------------------------------------------------------------------
# the pytest plugin (-p benchmarks.suite_costs): one record per test and phase

_records: dict[str, dict] = {}
_session_start = [0.0]


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def blank(slow: bool) -> dict:
    """A test's record before its phases: ``slow`` and a zero for each phase's wall, CPU and children's CPU."""
    return {"slow": slow, **{f"{p}_{k}": 0.0 for p in PHASES for k in ("wall", "cpu", "children")}}


def _timed(item, phase: str):
    """The body of a new-style hook wrapper: the phase's result, its wall and CPU times recorded (a failing
    phase included)."""
    t0, (s0, c0) = time.perf_counter(), _cpu()
    try:
        return (yield)
    finally:
        s1, c1 = _cpu()
        rec = _records.setdefault(item.nodeid, blank(item.get_closest_marker("slow") is not None))
        rec[f"{phase}_wall"] += time.perf_counter() - t0
        rec[f"{phase}_cpu"] += s1 - s0
        rec[f"{phase}_children"] += c1 - c0


def _hookwrapper(fn):
    import pytest

    return pytest.hookimpl(wrapper=True)(fn)


if os.environ.get(OUT_ENV):  # loaded as the plugin of a measured run
    @_hookwrapper
    def pytest_runtest_setup(item):
        return (yield from _timed(item, "setup"))

    @_hookwrapper
    def pytest_runtest_call(item):
        return (yield from _timed(item, "call"))

    @_hookwrapper
    def pytest_runtest_teardown(item, nextitem):
        return (yield from _timed(item, "teardown"))

    def pytest_sessionstart(session):
        _session_start[0] = time.perf_counter()

    def pytest_sessionfinish(session, exitstatus):
        Path(os.environ[OUT_ENV]).write_text(json.dumps({
            "tests": _records, "pytest_s": time.perf_counter() - _session_start[0],
            "exitstatus": int(exitstatus)}))


# ---------------------------------------------------------------------------------------------------------
# the command


def _run(args: list[str], out: Path | None) -> tuple[float, int, str]:
    env = {**os.environ}
    if out is not None:
        env[OUT_ENV] = str(out)
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "scripts/test.sh", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    return time.perf_counter() - t0, proc.returncode, proc.stdout.strip().splitlines()[-1] if proc.stdout else ""


def total(rec: dict, kind: str = "wall") -> float:
    return sum(rec[f"{p}_{kind}"] for p in PHASES)


def mostly(rec: dict) -> str:
    """Where a test's time went: computing in pytest, in child processes, or waiting."""
    wall, cpu, kids = total(rec), total(rec, "cpu"), total(rec, "children")
    waiting = max(0.0, wall - cpu - kids)
    return max((cpu, "computing in pytest"), (kids, "child processes"), (waiting, "waiting"))[1]


def shares(rec: dict) -> dict[str, float]:
    """A test's wall time split three ways, adding up to it: CPU in pytest first (capped at the wall time:
    two threads count double), then the children's CPU (capped at what is left), then waiting."""
    wall = total(rec)
    cpu = min(total(rec, "cpu"), wall)
    kids = min(total(rec, "children"), wall - cpu)
    return {"computing in pytest": cpu, "child processes": kids, "waiting": wall - cpu - kids}


def package(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else "tests (the runner)"


def summarise(tests: dict[str, dict]) -> dict:
    by_package = defaultdict(lambda: {"tests": 0, "quick_tests": 0, "wall_s": 0.0, "quick_wall_s": 0.0})
    by_module = defaultdict(float)
    kinds = defaultdict(float)
    for nodeid, rec in tests.items():
        row = by_package[package(nodeid)]
        row["tests"] += 1
        row["wall_s"] += total(rec)
        if not rec["slow"]:
            row["quick_tests"] += 1
            row["quick_wall_s"] += total(rec)
        by_module[nodeid.split("::")[0]] += total(rec)
        for kind, seconds in shares(rec).items():
            kinds[kind] += seconds
    return {"packages": dict(sorted(by_package.items())),
            "modules": dict(sorted(by_module.items(), key=lambda kv: -kv[1])),
            "kinds": dict(kinds)}


def _markdown(result: dict, top: int) -> str:
    full, quick, tests = result["full"], result.get("quick"), result["tests"]
    s = result["summary"]
    lines = ["# What the test suite costs", "",
             f"`{result['command']}` at {result['commit']} ({result['date']}; {result['machine']['cores']} cores).",
             "", "| run | tests | wall | budget | met | pytest said |", "|---|---|---|---|---|---|",
             f"| `bash scripts/test.sh` (CI) | {len(tests)} | {full['wall_s']:.0f} s | {BUDGETS['full']:.0f} s | "
             f"{'yes' if full['wall_s'] < BUDGETS['full'] else 'no'} | {full.get('summary_line', '')} |"]
    if quick:
        n_quick = sum(1 for r in tests.values() if not r["slow"])
        lines.append(f"| `bash scripts/test.sh --quick` | {n_quick} | {quick['wall_s']:.0f} s | "
                     f"{BUDGETS['quick']:.0f} s | {'yes' if quick['wall_s'] < BUDGETS['quick'] else 'no'} | "
                     f"{quick.get('summary_line', '')} |")
    lines += ["", "Each wall time is the script's, end to end: the set-up check, the import contracts, pytest's "
              f"collection ({full['wall_s'] - full['pytest_s']:.0f} s of the full run outside the tests) and the "
              "tests.", "", "## Per package", "",
              "| package | tests | quick | wall of its tests | of which quick |", "|---|---|---|---|---|"]
    for name, row in sorted(s["packages"].items(), key=lambda kv: -kv[1]["wall_s"]):
        lines.append(f"| `{name}` | {row['tests']} | {row['quick_tests']} | {row['wall_s']:.1f} s | "
                     f"{row['quick_wall_s']:.1f} s |")
    all_wall = sum(total(r) for r in tests.values())
    lines += ["", "## Where the time goes", "",
              "Over all tests: " + ", ".join(f"{k} {v:.0f} s ({v / all_wall:.0%})" for k, v in s["kinds"].items())
              + ": each test's wall time split in that order, CPU in pytest first (capped at the wall time: "
              "torch and numpy compute on two threads, so a test's CPU time can exceed it), the children's CPU "
              "next, waiting the rest. The table's columns give the raw CPU times.", "",
              f"## The {top} costliest tests", "",
              "| test | wall | setup | call | teardown | CPU in pytest | children's CPU | mostly | quick |",
              "|---|---|---|---|---|---|---|---|---|"]
    for nodeid, rec in sorted(tests.items(), key=lambda kv: -total(kv[1]))[:top]:
        lines.append(f"| `{nodeid}` | {total(rec):.1f} s | {rec['setup_wall']:.1f} | {rec['call_wall']:.1f} | "
                     f"{rec['teardown_wall']:.1f} | {total(rec, 'cpu'):.1f} | {total(rec, 'children'):.1f} | "
                     f"{mostly(rec)} | {'no' if rec['slow'] else 'yes'} |")
    lines += ["", f"## The {top} costliest modules", "", "| module | wall |", "|---|---|"]
    lines += [f"| `{m}` | {w:.1f} s |" for m, w in list(s["modules"].items())[:top]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.suite_costs", description=__doc__.split("\n\n")[0])
    p.add_argument("--skip-quick", action="store_true", help="time the full suite only")
    p.add_argument("--top", type=int, default=25, help="how many tests and modules the tables list")
    p.add_argument("--render", action="store_true",
                   help="write the page again from benchmarks/results/suite_costs.json; run nothing")
    args = p.parse_args(argv)
    if args.render:
        result = json.loads((RESULTS / "suite_costs.json").read_text())
        write_text(RESULTS / "suite_costs.md", _markdown(result, args.top))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "costs.json"
        print("the full suite, measured test by test ...", file=sys.stderr, flush=True)
        wall, code, last = _run(["-p", "benchmarks.suite_costs"], out)
        measured = json.loads(out.read_text())
    result = {"commit": commit(), "command": command("suite_costs", argv), "date": utc_now(), "machine": machine(),
              "full": {"wall_s": wall, "returncode": code, "pytest_s": measured["pytest_s"], "summary_line": last},
              "tests": measured["tests"], "budgets_s": BUDGETS}
    if not args.skip_quick:
        print("bash scripts/test.sh --quick ...", file=sys.stderr, flush=True)
        q_wall, q_code, q_last = _run(["--quick"], None)
        result["quick"] = {"wall_s": q_wall, "returncode": q_code, "summary_line": q_last}
    result["summary"] = summarise(result["tests"])
    write_json(RESULTS / "suite_costs.json", result)
    write_text(RESULTS / "suite_costs.md", _markdown(result, args.top))
    print((RESULTS / "suite_costs.md").read_text())
    return 0 if code == 0 and result.get("quick", {}).get("returncode", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
