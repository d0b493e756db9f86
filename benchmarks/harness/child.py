"""A command in a child process, timed, with its own peak memory (``wait4``'s rusage) and an optional cap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ChildRun:
    """What :func:`run_child` saw: wall seconds, the exit code (``None`` when stopped at the cap), the
    child's peak resident set (MiB) and whether the cap stopped it."""

    wall_s: float
    code: int | None
    peak_mib: float
    stopped: bool


def run_child(cmd: list[str], log: Path, cwd: Path | None = None, cap: float | None = None, busy: bool = False,
              env: dict | None = None) -> ChildRun:
    """Run ``cmd`` with its output in ``log``, alone or beside one CPU-bound Python loop (``busy``); a
    ``cap`` (seconds) kills its process group. Polled with ``wait4`` for the child's own rusage."""
    log.parent.mkdir(parents=True, exist_ok=True)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        with open(log, "w") as sink:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=env)
            stopped = False
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if cap is not None and time.perf_counter() - t0 > cap:
                    os.killpg(proc.pid, signal.SIGKILL)
                    _, status, usage = os.wait4(proc.pid, 0)
                    stopped = True
                    break
                time.sleep(0.05)
            wall = time.perf_counter() - t0
            proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
    return ChildRun(wall, None if stopped else code, usage.ru_maxrss / 1024, stopped)
