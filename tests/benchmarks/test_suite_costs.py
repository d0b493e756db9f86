"""benchmarks.suite_costs: its plugin records each phase of each test, in a real pytest run, and tells
computing, child processes and waiting apart; the summary and the page add up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import suite_costs

ROOT = Path(__file__).resolve().parents[2]

SUITE = '''
import subprocess, sys, time
import pytest

@pytest.fixture(scope="module")
def slow_fixture():
    time.sleep(0.3)

def test_waits(slow_fixture):
    time.sleep(0.4)

def test_computes():
    t = time.process_time()
    while time.process_time() - t < 0.4:
        pass

def test_runs_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass"], check=True)

@pytest.mark.slow
def test_fails_in_its_call():
    assert False
'''


def test_the_plugin_records_each_phase_and_where_the_time_went(tmp_path):
    (tmp_path / "test_sample.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = slow: slow\n")
    out = tmp_path / "costs.json"
    env = {**os.environ, suite_costs.OUT_ENV: str(out), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "benchmarks.suite_costs",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout  # the failing test fails the run, and is still recorded
    measured = json.loads(out.read_text())
    tests = {k.split("::")[-1]: v for k, v in measured["tests"].items()}
    assert set(tests) == {"test_waits", "test_computes", "test_runs_a_child", "test_fails_in_its_call"}
    waits = tests["test_waits"]
    assert waits["setup_wall"] >= 0.3 and waits["call_wall"] >= 0.4  # the module fixture falls in the setup
    assert suite_costs.mostly(waits) == "waiting"
    assert suite_costs.mostly(tests["test_computes"]) == "computing in pytest"
    assert tests["test_computes"]["call_cpu"] >= 0.35
    assert suite_costs.mostly(tests["test_runs_a_child"]) == "child processes"
    assert tests["test_runs_a_child"]["call_children"] >= 0.35
    assert tests["test_fails_in_its_call"]["slow"] and not tests["test_waits"]["slow"]
    assert measured["pytest_s"] >= sum(suite_costs.total(r) for r in measured["tests"].values())


def test_the_summary_and_the_page_add_up():
    def rec(slow, wall, cpu=0.0, children=0.0):
        return {**suite_costs.blank(slow), "call_wall": wall, "call_cpu": cpu, "call_children": children}

    tests = {"tests/models/test_a.py::test_x": rec(False, 1.0, cpu=0.9),
             "tests/models/test_a.py::test_y": rec(True, 3.0, children=2.5),
             "tests/service/test_b.py::test_z": rec(False, 2.0),
             "tests/test_processes.py::test_w": rec(False, 0.5, cpu=0.5)}
    s = suite_costs.summarise(tests)
    assert s["packages"]["models"] == {"tests": 2, "quick_tests": 1, "wall_s": 4.0, "quick_wall_s": 1.0}
    assert s["packages"]["tests (the runner)"]["tests"] == 1
    assert list(s["modules"]) == ["tests/models/test_a.py", "tests/service/test_b.py", "tests/test_processes.py"]
    assert s["kinds"] == pytest.approx({"computing in pytest": 1.4, "child processes": 2.5, "waiting": 2.6})
    result = {"command": "python -m benchmarks.suite_costs", "commit": "abc", "date": "d", "machine": {"cores": 2},
              "full": {"wall_s": 700.0, "pytest_s": 690.0, "summary_line": "4 passed"}, "quick": {"wall_s": 90.0},
              "tests": tests, "summary": s}
    page = suite_costs._markdown(result, top=2)
    assert "| `bash scripts/test.sh` (CI) | 4 | 700 s | 600 s | no | 4 passed |" in page
    assert "| `bash scripts/test.sh --quick` | 3 | 90 s | 120 s | yes |  |" in page
    assert "`tests/models/test_a.py::test_y` | 3.0 s" in page and "test_w" not in page.split("costliest tests")[1]
