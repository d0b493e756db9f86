"""Where a model under a radio decision is built: in a child process, so that no request waits for it.

Building a model whose centre leaves transmitters out (:meth:`models.model.RegionModel.adapted`) takes seconds
for a large survey: a new search index, and every calibration row re-centred and re-scored. Built in a thread
of the serving process, that work holds the interpreter lock in many short stretches, and a request that
needs the lock waits a switch interval each time (the serving benchmark's ``radio_adapting_p99_ms``).
:class:`RadioBuilder` builds it in a fresh child process (``spawn``, one build a child, so that no model
stays resident beside the server's; at the lowest CPU priority, one thread per library, so that the requests
keep the cores): the child loads the same bundle from disk, checks that it is the one served (its
``bundle_id``), builds and prepares the re-scored methods, and sends them back without their shapes (the
server holds those already). The server then only unpickles the centre and the thresholds.

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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from models.model import RegionModel
from models.radio import RadioView

log = logging.getLogger("lmve.service")

#: readings (rows x features) of a radio map from which a child builds it; a smaller map builds in the thread
#: in less time than a child takes to start
PROCESS_CELLS = 1_000_000
#: seconds a child may take (starting an interpreter, loading the bundle, building); beyond, the thread builds
TIMEOUT_S = 600.0


def _lowly() -> None:
    """The child's start: the lowest CPU priority and one thread per library, so that the server's requests
    keep the cores while it builds (on two cores its BLAS threads otherwise take both)."""
    from threadpoolctl import threadpool_limits

    os.nice(19)
    threadpool_limits(1)


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
        out = model.adapted(view, methods=methods)
        out.prepare()
        return out

    def _in_child(self, model: RegionModel, view: RadioView, path: Path, version: str) -> dict | None:
        try:
            with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                     initializer=_lowly, max_tasks_per_child=1) as pool:
                bare = pool.submit(adapted_methods, str(path), version, view).result(TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - any failure of the child: the thread builds it
            log.warning("radio: the adapted model could not be built in a child process (%s: %s); building it "
                        "in this worker", type(exc).__name__, exc)
            return None
        if bare is None:
            return None
        for name, reg in bare.items():
            reg.shape = reg.shape_ = model.methods[name].shape_
        return bare
