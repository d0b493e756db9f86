"""tests/processes.py and scripts/test.sh: a run that is interrupted (SIGTERM to the script, Ctrl-C's SIGINT to
its process group), fails, or whose pytest is killed outright leaves no process behind: not the
``lmve-serve`` and its workers, nginx and its workers, PostgreSQL's server nor chromedriver and Chromium
that tests/e2e/interrupt_probe.py starts. Each process of the run is found by an environment variable only it
carries, or by the process group of a server the probe started (nginx and PostgreSQL rewrite their
environment), so the check sees daemons (the postmaster) as well as children."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests import processes

ROOT = Path(__file__).resolve().parents[2]


def of_run(token: str, groups: Path | None = None) -> dict[int, str]:
    """The live processes whose environment holds ``LMVE_PROBE=token``, and those of the process groups
    recorded in ``groups`` (nginx and PostgreSQL rewrite their environment): pid -> command."""
    return processes.leftovers(token, groups, variable="LMVE_PROBE")


def until_gone(token: str, groups: Path, seconds: float) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while (left := of_run(token, groups)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_stop_reaches_what_the_spawned_process_forked():
    """``stop`` ends the whole group: the spawned process and the child it started."""
    proc = processes.Processes().spawn([sys.executable, "-c", "import subprocess, sys, time; "
                            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                            "print(p.pid, flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
    grandchild = int(proc.stdout.readline())
    assert os.getpgid(grandchild) == proc.pid != os.getpgid(0)  # a group of its own, the grandchild in it
    assert processes.running(grandchild)
    assert processes.stop(proc, timeout=5) == -signal.SIGTERM
    deadline = time.monotonic() + 5
    while processes.running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes.running(grandchild)


def test_stop_all_runs_each_cleanup_once_and_stops_what_is_left():
    record, ran = processes.Processes(), []
    record.on_exit(lambda: ran.append("a"))
    record.on_exit(lambda: 1 / 0)  # a failing cleanup keeps none of the others from running
    proc = record.spawn([sys.executable, "-c", "import time; time.sleep(600)"])
    done = record.spawn([sys.executable, "-c", "pass"])
    done.wait(timeout=30)
    assert record.stop_all(timeout=5) == [f"{proc.pid} {proc.args!r}"] and proc.poll() == -signal.SIGTERM
    assert ran == ["a"]
    assert record.stop_all() == [] and ran == ["a"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM to the script", "SIGINT to its group", "a failing test",
                                 "SIGKILL to pytest"])
def test_an_interrupted_or_failed_run_leaves_no_process(how, tmp_path):
    if shutil.which("nginx") is None or shutil.which("chromium") is None:
        pytest.skip("nginx or chromium is not installed (.ci/run installs them)")
    token, ready = uuid.uuid4().hex, tmp_path / "ready.json"
    env = {**os.environ, "LMVE_PROBE": token, "LMVE_PROBE_READY": str(ready)}
    log = tmp_path / "run.log"
    # as from a terminal: SIGINT at its default (a shell cannot trap a signal ignored when it starts, and this
    # run's own pytest may be a background job of scripts/test.sh, which ignores it)
    script = subprocess.Popen(["bash", "scripts/test.sh", "-p", "no:cacheprovider", "tests/e2e/interrupt_probe.py"],
                              cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                              start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = None
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            assert script.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        started = json.loads(ready.read_text())
        groups = tmp_path / "groups"
        groups.write_text("".join(f"{started[k]} {processes.start_time(started[k])}\n"
                                  for k in ("lmve-serve", "nginx", "postgres", "chromedriver")))
        names = " ".join(of_run(token, groups).values())
        # the check can fail: each kind of server is seen while it runs, daemonised PostgreSQL included
        for name in ("lmve-serve", "multiprocessing", "nginx: worker", "postgres", "chromedriver", "chromium"):
            assert name in names, (name, names)
        sent = time.monotonic()
        if how == "SIGTERM to the script":
            script.send_signal(signal.SIGTERM)
        elif how == "SIGINT to its group":
            os.killpg(script.pid, signal.SIGINT)
        elif how == "SIGKILL to pytest":
            os.kill(started["pytest"], signal.SIGKILL)
        else:
            ready.with_suffix(".fail").touch()
        status = script.wait(timeout=120)
        text = log.read_text()
        # the run ended because of the signal (or the failure), not at the probe's own deadline
        assert status != 0 and time.monotonic() - sent < 60 and "no interrupt came" not in text, text[-3000:]
        assert until_gone(token, groups, 10) == {}, text[-3000:]
        assert not Path(started["cluster"]).exists() or how == "SIGKILL to pytest"
        # the script's own sweep is for a run that cannot unwind; otherwise pytest stopped everything itself
        assert ("stopping what the run left running" in text) == (how == "SIGKILL to pytest"), text[-3000:]
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait()
        for pid in of_run(token, tmp_path / "groups"):
            os.kill(pid, signal.SIGKILL)
        if started is not None:
            shutil.rmtree(started["cluster"], ignore_errors=True)
