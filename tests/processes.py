"""The servers the tests start, and their stopping when a test is done, fails or the run is interrupted.

A server (``lmve-serve``, nginx, the KServe container's command, chromedriver and its Chromium) is started
with :func:`spawn`: in a process group of its own, so that :func:`stop` reaches whatever it forked (uvicorn's
workers, nginx's, Chromium's renderers), and recorded until it is stopped. A resource that is not a child
(PostgreSQL's postmaster, which ``pg_ctl`` daemonises) registers its cleanup with :func:`on_exit`.

:func:`stop_all` stops whatever is still recorded; ``tests/conftest.py`` calls it from ``pytest_unconfigure``
and it is registered with :mod:`atexit`. :func:`interrupt_on_termination` turns SIGTERM and SIGHUP into the
:class:`KeyboardInterrupt` that Ctrl-C raises, so that an interrupted run unwinds like a stopped one: the test's
``finally`` blocks, then every fixture's teardown (pytest's own ``pytest_sessionfinish``), then
:func:`stop_all`. A second signal while that runs is ignored.

A run that cannot unwind (its pytest killed outright) is swept by ``scripts/test.sh``, which runs
``python -m tests.processes sweep`` after pytest: it stops every process that carries the run's
``LMVE_TEST_RUN`` in its environment, and every process group the run recorded in the file that
``LMVE_TEST_GROUPS`` names (nginx and PostgreSQL rewrite their own environment for their process titles, so
only their group finds them). A group is swept only while its leader is the process that was recorded (the
same start time), never a later process that reuses its number.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

RUN_ENV, GROUPS_ENV = "LMVE_TEST_RUN", "LMVE_TEST_GROUPS"

class Processes:
    """A record of started process groups and of cleanups; the module's functions use one for the run."""

    def __init__(self):
        self._lock = threading.Lock()
        self._children: dict[int, subprocess.Popen] = {}
        self._cleanups: list[Callable[[], object]] = []

    def spawn(self, args, **popen_kwargs) -> subprocess.Popen:
        """``subprocess.Popen(args, **popen_kwargs)`` in a new session (its own process group), recorded until
        :meth:`stop` or :meth:`stop_all` stops it."""
        return self.adopt(subprocess.Popen(args, start_new_session=True, **popen_kwargs))

    def adopt(self, proc: subprocess.Popen) -> subprocess.Popen:
        """Record ``proc`` (started by a library with ``start_new_session=True``) as :meth:`spawn` records its own."""
        with self._lock:
            self._children[proc.pid] = proc
        record_group(proc.pid)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 30.0) -> int | None:
        """Stop ``proc``'s process group: SIGTERM, ``timeout`` seconds to exit, then SIGKILL; then SIGKILL to
        whatever of the group outlived its leader. The leader's exit status."""
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
        _signal_group(proc.pid, signal.SIGKILL)
        with self._lock:
            self._children.pop(proc.pid, None)
        return proc.returncode

    def on_exit(self, cleanup: Callable[[], object]) -> Callable[[], object]:
        """Run ``cleanup`` at :meth:`stop_all` (once; it should not mind having run already). Returns it."""
        with self._lock:
            self._cleanups.append(cleanup)
        return cleanup

    def stop_all(self, timeout: float = 10.0) -> list[str]:
        """Stop every recorded process group and run every registered cleanup, each once (the last registered
        first); what it stopped that was still running."""
        with self._lock:
            children, cleanups = list(self._children.values()), list(self._cleanups)
            self._cleanups.clear()
        stopped = [f"{p.pid} {p.args!r}" for p in children if p.poll() is None]
        for proc in children:
            self.stop(proc, timeout=timeout)
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception:  # one failing cleanup must not keep the others from running
                pass
        return stopped


_run = Processes()
spawn, adopt, stop, on_exit, stop_all = _run.spawn, _run.adopt, _run.stop, _run.on_exit, _run.stop_all


def record_group(pgid: int) -> None:
    """Add the process group ``pgid`` (its leader's pid) and its leader's start time to the file that
    ``$LMVE_TEST_GROUPS`` names, for :func:`sweep`; nothing when the variable is not set."""
    path, started = os.environ.get(GROUPS_ENV), start_time(pgid)
    if path and started is not None:
        with open(path, "a") as f:
            f.write(f"{pgid} {started}\n")


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/pid/stat`` after the command name (state first); None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def running(pid: int) -> bool:
    """``pid`` exists and is no zombie (a container's init may never reap one)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return None if fields is None else fields[19]


def leftovers(token: str, groups: Path | None, variable: str = RUN_ENV) -> dict[int, str]:
    """The live processes of a run, other than this one and its parent: those whose environment holds
    ``variable=token`` and the members of the groups recorded in ``groups`` whose leader is still the
    recorded process. pid -> command line."""
    recorded = set()
    if groups is not None and groups.exists():
        for line in groups.read_text().split("\n"):
            if line.strip():
                pgid, started = line.split()
                if start_time(int(pgid)) == started:
                    recorded.add(int(pgid))
    wanted, found = f"{variable}={token}".encode(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (os.getpid(), os.getppid()):
            continue
        pid, fields = int(entry.name), _stat(int(entry.name))
        if fields is None or fields[0] == "Z":  # gone, or a zombie: nothing left to stop
            continue
        try:
            ours = int(fields[2]) in recorded or wanted in (entry / "environ").read_bytes().split(b"\0")
            if ours:
                found[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def sweep(token: str, groups: Path | None, grace: float = 5.0) -> dict[int, str]:
    """SIGTERM to each of :func:`leftovers`, ``grace`` seconds, then SIGKILL to those still there; what it
    found."""
    found = leftovers(token, groups)
    for pid in found:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := [p for p in found if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def interrupt_on_termination() -> None:
    """SIGTERM and SIGHUP raise :class:`KeyboardInterrupt` in the main thread, as SIGINT does; after the first,
    both are ignored so that the cleanup it started can finish (a second Ctrl-C still cuts it short, and
    :mod:`atexit` then runs :func:`stop_all`)."""

    def interrupt(signum, frame):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


atexit.register(stop_all)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.processes sweep``: :func:`sweep` for the run in ``$LMVE_TEST_RUN`` and
    ``$LMVE_TEST_GROUPS``; says on stderr what it stopped."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["sweep"] or not os.environ.get(RUN_ENV):
        print(f"usage: {RUN_ENV}=... [{GROUPS_ENV}=FILE] python -m tests.processes sweep", file=sys.stderr)
        return 2
    groups = os.environ.get(GROUPS_ENV)
    found = sweep(os.environ[RUN_ENV], Path(groups) if groups else None)
    if found:
        print("scripts/test.sh: stopping what the run left running:", file=sys.stderr)
        for pid, command in sorted(found.items()):
            print(f"  {pid} {command[:160]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
