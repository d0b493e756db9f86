"""Where a model under a radio decision is built: in a child process, so that no request waits for it.

Building a model whose centre leaves transmitters out (:meth:`models.model.RegionModel.adapted`) takes seconds
for a large survey; in a thread of the server it would hold the interpreter lock in many short stretches,
each one a request's wait. :class:`RadioBuilder` builds it in a fresh child process (``spawn``, one build a
child, so that no model stays resident beside the server's) under ``SCHED_IDLE`` (set by the server as soon
as the child exists, before its imports; ``nice 19`` where that policy is refused), one thread per library:
it takes only the CPU time the requests leave. The child loads the same bundle from disk, checks
that it is the one served (its ``bundle_id``), builds and prepares the re-scored methods, and sends them back
without their shapes (the server holds those already). The server then only unpickles the centre and the
thresholds. :meth:`RadioBuilder.close` (at shutdown) kills a child still building, so that a server stops at
once, not when the build ends.

A radio map of under :data:`PROCESS_CELLS` readings is built in the calling thread (starting a child costs
more than such a build), and so is every one with ``LMVE_RADIO_BUILD=thread``; a build the child cannot make
(the bundle on disk changed, the child died) is made in the thread, and said.

Only the decision's gone and new transmitters are built into the methods; its offsets are applied to each
query (:meth:`models.radio.RadioView.apply`). A decision that differs from the last one built for the same
bundle only in its offsets (an offset re-estimated at every flush) reuses the methods of the model served before it
(the caller passes that model: it holds it already), so nothing is rebuilt and no build outlives its model.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import threading
from pathlib import Path

from models.model import RegionModel
from models.radio import RadioView

log = logging.getLogger("lmve.service")

#: readings (rows x features) of a radio map from which a child builds it; a smaller map builds in the thread
#: in less time than a child takes to start
PROCESS_CELLS = 1_000_000
#: seconds a child may take (starting an interpreter, loading the bundle, building); beyond, the thread builds
TIMEOUT_S = 600.0


def _idle(pid: int) -> None:
    """Process ``pid`` (and the threads it starts) at the lowest CPU priority: ``SCHED_IDLE``, else ``nice 19``."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused: the lowest nice value instead
        try:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
        except OSError:  # the child already gone: its build fails and is said
            pass


def _child(conn, path: str, version: str, view: RadioView) -> None:
    """The child's work (at the idle priority the server set): one thread per library (on two cores its BLAS
    threads otherwise take both), then :func:`adapted_methods` sent back as ``("ok", methods)`` or
    ``("error", reason)``."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    try:
        conn.send(("ok", adapted_methods(path, version, view)))
    except BaseException as exc:  # noqa: BLE001 - whatever stops the build is the server's to say
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def adapted_methods(path: str, version: str, view: RadioView) -> dict | None:
    """In the child: the re-scored methods of the bundle at ``path`` under ``view``, prepared, each without its
    shape; ``None`` where the decision refits nothing.
    Raises :class:`RuntimeError` when the bundle there is not ``version``."""
    from models.bundle import load_bundle

    model = load_bundle(Path(path))
    found = model.manifest.get("bundle_id", "unknown")
    if found != version:
        raise RuntimeError(f"{path} now holds bundle {found}, not the served {version}")
    out = model.adapted(view)
    if out.methods is model.methods:
        return None
    out.prepare()
    bare = {}
    for name, reg in out.methods.items():
        reg = copy.copy(reg)
        reg.shape = reg.shape_ = None  # the server's own, put back there
        bare[name] = reg
    return bare


class RadioBuilder:
    """Builds :meth:`RegionModel.adapted` models, in a child process (``mode="process"``) or the calling
    thread (``"thread"``)."""

    def __init__(self, mode: str = "process"):
        self.mode = mode
        self._lock = threading.Lock()
        self._child: multiprocessing.process.BaseProcess | None = None
        self.closed = False

    def close(self) -> None:
        """Build nothing more; kill a child still building (its build returns the model as trained)."""
        with self._lock:
            self.closed = True
            child = self._child
        if child is not None and child.is_alive():
            child.kill()

    def build(self, model: RegionModel, view: RadioView, path: Path | None, version: str,
              last: RegionModel | None = None) -> RegionModel:
        """``model`` (served from the bundle ``version`` at ``path``) under ``view``, prepared.

        Blocking: call it from a thread.

        Parameters
        ----------
        model : RegionModel
            The model as trained.
        view : RadioView
            The decision to serve it under.
        path : Path or None
            The bundle's folder, for a child to load (``None``: built in this thread).
        version : str
            The bundle's id, checked by the child against the bundle it loads.
        last : RegionModel or None
            The model served for ``version`` before this decision: its methods are reused where its view has
            the same gone and new transmitters (only the offsets differ).

        Returns
        -------
        RegionModel
            ``model`` under ``view``.

        Raises
        ------
        InputError
            What :meth:`RegionModel.adapted` raises (a view the model cannot follow).
        """
        methods = None
        if model.refits(view):
            if last is not None and last.view is not None and (last.view.gone, last.view.new) == (view.gone, view.new):
                methods = last.methods
            elif (self.mode == "process" and path is not None and model.radio_map is not None
                    and model.radio_map.features.size >= PROCESS_CELLS):
                methods = self._in_child(model, view, path, version)
        if self.closed:  # shutting down: nothing built in this thread either
            return model
        out = model.adapted(view, methods=methods)
        out.prepare()
        return out

    def _in_child(self, model: RegionModel, view: RadioView, path: Path, version: str) -> dict | None:
        ctx = multiprocessing.get_context("spawn")
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, args=(send, str(path), version, view), daemon=True,
                            name="lmve-radio-build")
        with self._lock:
            if self.closed:
                return None
            child.start()
            self._child = child
        _idle(child.pid)  # before the child's imports: they take seconds of CPU too
        send.close()
        try:
            if not receive.poll(TIMEOUT_S):
                raise TimeoutError(f"no model after {TIMEOUT_S:.0f} s")
            status, got = receive.recv()
            if status != "ok":
                raise RuntimeError(got)
        except (EOFError, OSError, RuntimeError, TimeoutError) as exc:
            if not self.closed:
                reason = ("the child died" if isinstance(exc, EOFError) else str(exc) if isinstance(exc, RuntimeError)
                          else f"{type(exc).__name__}: {exc}")
                log.warning("radio: the adapted model could not be built in a child process (%s); building it "
                            "in this worker", reason)
            return None
        finally:
            receive.close()
            if child.is_alive():
                child.kill()
            child.join()
            with self._lock:
                self._child = None
        if got is None:
            return None
        for name, reg in got.items():
            reg.shape = reg.shape_ = model.methods[name].shape_
        return got
