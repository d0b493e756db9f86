"""The data plane: what every protocol asks of the served models, in one place.

:class:`DataPlane` owns every request's work: the one limit on requests in flight over all protocols
(:class:`InFlight`), the model lookup (by name, the default, a version) with the request's metric label, the
computations (``predict_region``, ``contains``, the Open Inference Protocol's ``infer``, ``feedback``) run
inline or in the thread pool by their size (:meth:`DataPlane.run`), the readiness and metadata answers, loading
and unloading, and what each request leaves behind (its metrics, the shift test's scores, labelled feedback).

The request path runs one way. The REST routers (:mod:`service.routers`) and the gRPC endpoint
(:mod:`service.grpc_endpoint`) decode a protocol, call one method with the model's name (or the snapshot
:meth:`DataPlane.loaded` gave) and a protocol-free request, and get a protocol-free reply
(:class:`RegionReply`, :class:`~service.open_inference.tensors.InferResult`); the data plane never calls
back into them. Each adapter encodes its reply through :meth:`DataPlane.run` too, so that writing a large
batch's JSON or tensors stays off the event loop as its computation did. Every refusal is an
:class:`~service.exceptions.APIError` carrying its status and code, which each protocol renders once.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import anyio

from models import answers
from models.exceptions import BundleError
from service import geojson, inference
from service.exceptions import APIError, V2Error
from service.metrics import Metrics
from service.monitor import Monitor
from service.open_inference.tensors import TYPICALITY, InferCall, InferResult
from service.repository import ModelRepository, UnknownModelError
from service.settings import ServiceSettings
from service.radio_follower import RadioFollower
from service.shift import NO_STEP, ShiftAlarm
from service.state import StateUnavailable
from service.store import Loaded, ModelStore
from service.sync import Follower

#: batches up to this many rows are computed on the event loop (well under a millisecond: a thread hop
#: would cost more than the work); larger ones go to the thread pool so that one big batch never stalls
#: health checks and small requests
INLINE_ROWS = 32
#: the key under which a request's labels (the ASGI scope, a gRPC call's dict) hold the model's name for the
#: request metrics, set by :meth:`DataPlane.loaded` once the name is known
MODEL_LABEL = "lmve.model"
SERVER = {"name": "lmve", "version": "0.1.0", "extensions": ["model_repository", "binary_tensor_data"]}


class InFlight:
    """The requests in flight over every protocol, against one limit (``LMVE_MAX_CONCURRENCY``): the REST guards
    and the gRPC endpoint count in the same instance, so the limit holds for both together. Every protocol
    runs on the worker's one event loop, so a check and its count need no lock.

    Parameters
    ----------
    limit : int
        Requests in flight at once.
    """

    __slots__ = ("limit", "count")

    def __init__(self, limit: int):
        self.limit, self.count = limit, 0

    def enter(self) -> bool:
        """Count one more request in flight; False (nothing counted) when ``limit`` are already."""
        if self.count >= self.limit:
            return False
        self.count += 1
        return True

    def leave(self) -> None:
        """Count one request in flight fewer."""
        self.count -= 1

    def refusal(self) -> str:
        """Why a request was refused, in the words every protocol answers."""
        return f"{self.limit} requests are already in flight (LMVE_MAX_CONCURRENCY); retry shortly"


@dataclass(frozen=True, slots=True)
class RegionReply:
    """A region computation's answer (:class:`models.model.RegionAnswer`), the snapshot that computed it, and
    the members every protocol returns beside its rows: method, fallback, levels asked and served, bundle,
    warnings."""

    answer: object
    meta: dict
    loaded: Loaded


class DataPlane:
    """The served models' operations, shared by every protocol.

    Parameters
    ----------
    repository : ModelRepository
        The models by name.
    settings : ServiceSettings
        The limits: rows, boundary points, strict inputs.
    metrics : Metrics
        Prometheus families each request is counted in.
    monitor : Monitor
        Labelled feedback and the adaptive level.
    shift : ShiftAlarm
        The shift test over each model's queries.
    follower : Follower
        Loads, unloads and publishes bundles on every worker.
    radio : RadioFollower
        The radio watch: what each model's queries still hear, and the model served under it.
    """

    def __init__(self, repository: ModelRepository, settings: ServiceSettings, metrics: Metrics, monitor: Monitor,
                 shift: ShiftAlarm, follower: Follower, radio: RadioFollower):
        self.repository, self.settings, self.metrics = repository, settings, metrics
        self.monitor, self.shift, self.follower, self.radio = monitor, shift, follower, radio
        self.in_flight = InFlight(settings.max_concurrency)

    # ------------------------------------------------------------------------------------------ lookup
    def store(self, name: str | None = None, field: str = "model") -> ModelStore:
        """The store of a model.

        Parameters
        ----------
        name : str, default=None
            The model's name; ``None`` is the default model.
        field : str, default="model"
            The request field an error names.

        Returns
        -------
        ModelStore

        Raises
        ------
        APIError
            404 naming an unknown model and the known ones; 422 when several models serve, none is the
            default and none was named; 503 when the configured default is missing.
        """
        repository = self.repository
        if name is None:
            store = repository.default
            if store is not None:
                return store
            names = ", ".join(sorted(repository.stores)) or "none"
            if repository.default_name is not None or not repository.stores:
                raise APIError(503, "Service Unavailable", f"no default model: {repository.no_default_reason()}",
                               headers={"Retry-After": "5"})
            raise APIError(422, "Model not named", repository.no_default_reason(), field=field,
                           expected=f"one of: {names}", received="null")
        store = repository.stores.get(name)
        if store is None:
            raise APIError(404, "Unknown model", str(UnknownModelError(name, repository.stores)), field=field,
                           expected=f"one of: {', '.join(sorted(repository.stores)) or 'none'}", received=name)
        return store

    @staticmethod
    def current(store: ModelStore, version: str | None = None) -> Loaded:
        """The bundle a store serves, as one snapshot: a reload mid-request does not change it.

        Parameters
        ----------
        store : ModelStore
            The model's store.
        version : str, default=None
            The bundle id the request names; ``None``: whichever is served.

        Returns
        -------
        Loaded
            The model, its name and version.

        Raises
        ------
        APIError
            503 with the reason while no bundle is verified.
        V2Error
            404 when ``version`` is not the one served.
        """
        loaded = store.current
        if loaded is None:
            raise APIError(503, "Service Unavailable", f"model {store.name!r} is not ready ({store.state}): "
                           f"{store.reason}", headers=None if store.unloaded_at is not None else {"Retry-After": "5"})
        if version is not None and version != loaded.version:
            raise V2Error(404, f"model {loaded.name!r} has no version {version!r}; it serves {loaded.version!r}")
        return loaded

    def loaded(self, name: str | None = None, version: str | None = None, labels: dict | None = None,
               field: str = "model") -> Loaded:
        """The snapshot a request computes with: :meth:`current` of :meth:`store` under the radio it is sent
        (:meth:`service.radio_follower.RadioFollower.serving`), the model's name recorded in ``labels`` for the request
        metrics.

        Parameters
        ----------
        name : str, default=None
            The model's name; ``None`` is the default model.
        version : str, default=None
            The bundle id the request names.
        labels : dict, default=None
            The request's labels (the ASGI scope, a gRPC call's dict): :data:`MODEL_LABEL` is set to the model's
            name once it is known, before readiness is checked.
        field : str, default="model"
            The request field an error names.

        Returns
        -------
        Loaded

        Raises
        ------
        APIError
            As :meth:`store` and :meth:`current`.
        """
        store = self.store(name, field)
        if labels is not None:
            labels[MODEL_LABEL] = store.name
        return self.radio.serving(self.current(store, version))

    # ------------------------------------------------------------------------------------------ readiness
    def unready(self) -> dict[str, str]:
        """Why the service is not ready.

        Returns
        -------
        dict of str -> str
            Each model that should serve and does not, with its reason (key ``""``: every model is unloaded);
            empty when the service is ready.
        """
        not_ready = self.repository.not_ready()
        if not not_ready and not any(s.current is not None for s in self.repository.stores.values()):
            not_ready = {"": "every model is unloaded"}
        return not_ready

    @staticmethod
    def server_metadata() -> dict:
        """The Open Inference Protocol's server metadata.

        Returns
        -------
        dict
            Name, version and extensions.
        """
        return SERVER

    @staticmethod
    def model_metadata(loaded: Loaded) -> dict:
        """The Open Inference Protocol's model metadata: the tensors a model takes and gives.

        Parameters
        ----------
        loaded : Loaded
            The served snapshot.

        Returns
        -------
        dict
            Name, versions, platform, inputs and outputs with their datatypes and shapes, the level and the
            primary method.
        """
        model, n = loaded.model, loaded.model.n_targets

        def tensor(name, shape, datatype="FP64", **params):
            return {"name": name, "datatype": datatype, "shape": shape, "parameters": params}

        outputs = [tensor(f.name, [-1] + [n] * len(f.tensor[1]), f.tensor[0],
                          **({"requires": "points"} if answers.REGION not in f.of else {}))
                   for f in answers.FIELDS if f.tensor is not None
                   and (f.name != TYPICALITY or model.typicality is not None)]
        return {"name": loaded.name, "versions": [loaded.version], "platform": "lmve",
                "inputs": [tensor("features", [-1, model.n_features], optional=False),
                           tensor("points", [-1, n], optional=True),
                           tensor("centers", [-1, n], optional=not model.requires_centers)],
                "outputs": outputs,
                "parameters": {"coverage": model.coverage, "primary_method": model.primary_method}}

    def repository_index(self, only_ready: bool = False) -> list[dict]:
        """Every model with its state.

        Parameters
        ----------
        only_ready : bool, default=False
            Leave out the models that serve nothing.

        Returns
        -------
        list of dict
            Name, state, version (its bundle id) when loaded, and the reason when it does not serve.
        """
        index = []
        for name, store in sorted(self.repository.stores.items()):
            cur = store.current
            if only_ready and cur is None:
                continue
            entry = {"name": name, "state": store.state}
            if cur is not None:
                entry["version"] = cur.version
            if store.reason is not None:
                entry["reason"] = store.reason
            index.append(entry)
        return index

    # ------------------------------------------------------------------------------------------ control
    async def load(self, name: str | None, path=None) -> tuple[Loaded, Loaded | None]:
        """Load and verify a bundle for a model and swap it in on every worker.

        Parameters
        ----------
        name : str or None
            The model; ``None`` is the default model.
        path : str or path-like, default=None
            The bundle directory; ``None`` is the model's own directory.

        Returns
        -------
        (Loaded, Loaded or None)
            The new snapshot and the one it replaced.

        Raises
        ------
        APIError
            404 for a model the repository lacks; 422 for a refused bundle (the old one keeps serving).
        """
        repository = self.repository
        store = self.store(name) if name is None or name in repository.stores else None
        previous = None if store is None else store.current
        try:
            return await anyio.to_thread.run_sync(self.follower.swap, name, path)
        except UnknownModelError as exc:
            raise APIError(404, "Unknown model", str(exc), field="model", expected=f"one of: {', '.join(exc.known)}",
                           received=exc.name) from None
        except BundleError as exc:
            serving = previous.version if previous is not None else "nothing"
            target = path or (store.path if store is not None else name)
            raise APIError(422, "Bundle refused", f"{exc}; still serving {serving}", field="bundle",
                           expected="a verified bundle directory", received=str(target)) from None

    async def unload(self, name: str) -> tuple[ModelStore, Loaded | None]:
        """Unload a model on every worker.

        Parameters
        ----------
        name : str
            The model.

        Returns
        -------
        (ModelStore, Loaded or None)
            Its store and what it served.

        Raises
        ------
        APIError
            404 for an unknown model.
        """
        store = self.store(name)
        return store, await anyio.to_thread.run_sync(self.follower.unload, name)

    # ------------------------------------------------------------------------------------------ requests
    async def predict_region(self, name: str | None, body, method: str | None = None, geo: bool = False, *,
                             labels: dict | None = None) -> RegionReply:
        """A region request for the model ``name``: :meth:`region_reply` where its size belongs (:meth:`run`).

        Parameters
        ----------
        name : str or None
            The model; ``None`` is the default model.
        body : PredictRegionRequest
            Features, level, centres and boundary points.
        method : str, default=None
            The method asked for; ``None`` is the primary, with its fallbacks.
        geo : bool, default=False
            The answer is GeoJSON.
        labels : dict, default=None
            The request's labels (:meth:`loaded`).

        Returns
        -------
        RegionReply
            The answer, free of any protocol: the adapter encodes it.

        Raises
        ------
        APIError, InputError
            As :meth:`loaded` and :meth:`region_reply`.
        """
        loaded = self.loaded(name, None, labels)
        return await self.run(len(body.features), self.region_reply, loaded, body, method, geo)

    async def contains(self, name: str | None, body, method: str | None = None, *,
                       labels: dict | None = None) -> RegionReply:
        """A containment request: :meth:`contains_reply` where its size belongs, as :meth:`predict_region`.

        Parameters
        ----------
        name : str or None
            The model (``None``: the default).
        body : ContainsRequest
            Features, points, level, centres, floors.
        method : str, default=None
            The method (``None``: the primary, with its fallbacks).
        labels : dict, default=None
            Where :meth:`loaded` records the model's name.

        Returns
        -------
        RegionReply

        Raises
        ------
        APIError, InputError
            As :meth:`loaded` and :meth:`contains_reply`.
        """
        loaded = self.loaded(name, None, labels)
        return await self.run(len(body.features), self.contains_reply, loaded, body, method)

    async def infer(self, loaded: Loaded, call: InferCall) -> InferResult:
        """An Open Inference Protocol request: :meth:`infer_result` where its size belongs.

        The protocol checks the model before it reads the body (404, 503 before a 400 naming an input): the
        adapter takes ``loaded`` from :meth:`loaded`, then decodes ``call``.

        Parameters
        ----------
        loaded : Loaded
            The served snapshot.
        call : InferCall
            The decoded request.

        Returns
        -------
        InferResult
            The outputs, free of any protocol: the adapter encodes them.

        Raises
        ------
        APIError, InputError
            As :meth:`infer_result`.
        """
        return await self.run(call.rows, self.infer_result, loaded, call)

    # ------------------------------------------------------------------------------------------ compute
    @staticmethod
    async def run(rows: int, fn, *args):
        """Run a computation where its size belongs: small batches on the event loop, larger ones in the
        thread pool.

        Parameters
        ----------
        rows : int
            The batch's rows; up to :data:`INLINE_ROWS` run inline.
        fn : callable
            The computation.
        *args
            Its arguments.

        Returns
        -------
        object
            What ``fn(*args)`` returns.
        """
        if rows <= INLINE_ROWS:
            return fn(*args)
        # abandon_on_cancel: at the request timeout the route answers 504 at once; the abandoned thread
        # finishes its (row-bounded) batch and its result is dropped
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    def region_reply(self, loaded: Loaded, body, method: str | None, geo: bool = False) -> RegionReply:
        """The calibrated regions of a request's rows.

        Parameters
        ----------
        loaded : Loaded
            The served snapshot.
        body : PredictRegionRequest
            Features, level, centres and boundary points.
        method : str or None
            The method asked for; ``None`` is the primary, with its fallbacks.
        geo : bool, default=False
            The answer is GeoJSON: the model's targets must be 2-D.

        Returns
        -------
        RegionReply
            The answer and the members every protocol returns beside its rows.

        Raises
        ------
        APIError
            413 over the row limit; 422 naming a bad ``boundary_points``, or asking GeoJSON of a model whose
            targets are not 2-D.
        InputError
            The model's own input errors (rows, level, method, centres).
        """
        settings, model = self.settings, loaded.model
        if geo:
            geojson.check(model)
        inference.check_row_limit(body.features, "features", settings.max_rows)
        k = body.boundary_points
        if k is not None and not (3 <= k <= settings.max_boundary_points):
            raise APIError(422, "Invalid input", f"boundary_points must lie in [3, {settings.max_boundary_points}]; "
                           f"got {k}", field="boundary_points",
                           expected=f"an integer in [3, {settings.max_boundary_points}]", received=str(k))
        if k is not None and model.n_targets not in (2, 3):
            raise APIError(422, "Invalid input", "boundary points are available for 2-D or 3-D targets only",
                           field="boundary_points", expected="null", received=str(k))
        t0 = time.perf_counter()
        level, adaptive, thresholds = self._level(body.coverage, loaded, method)
        answer = model.predict_region(body.features, method, level, kind="ellipsoid", centers=body.centers,
                                      thresholds=thresholds, strict=settings.strict_inputs, device=body.device)
        self.radio.observe(loaded, answer.readings, body.device)
        return self._reply("predict-region", loaded, answer, body.coverage, len(body.features), t0, level, adaptive,
                           thresholds)

    def contains_reply(self, loaded: Loaded, body, method: str | None) -> RegionReply:
        """Whether each of a request's points lies in its row's region, with distance, p-value and typicality.

        Parameters
        ----------
        loaded : Loaded
            The served snapshot.
        body : ContainsRequest
            Features, points, level, centres and floors.
        method : str or None
            The method asked for; ``None`` is the primary, with its fallbacks.

        Returns
        -------
        RegionReply

        Raises
        ------
        APIError
            413 over the row limit.
        InputError
            The model's own input errors.
        """
        settings, model = self.settings, loaded.model
        inference.check_row_limit(body.features, "features", settings.max_rows)
        t0 = time.perf_counter()
        level, adaptive, thresholds = self._level(body.coverage, loaded, method)
        answer = model.assess(body.features, body.points, method, level, kind="ellipsoid", centers=body.centers,
                              thresholds=thresholds, floors=body.floors, buildings=body.buildings,
                              strict=settings.strict_inputs, device=body.device)
        self.radio.observe(loaded, answer.readings, body.device)
        return self._reply("contains", loaded, answer, body.coverage, len(body.features), t0, level, adaptive,
                           thresholds)

    def infer_result(self, loaded: Loaded, call: InferCall) -> InferResult:
        """The Open Inference Protocol's answer: the regions and, with points, their containment.

        Both come from the method and level :meth:`region_reply` would use.

        Parameters
        ----------
        loaded : Loaded
            The served snapshot.
        call : InferCall
            The decoded request: tensors, outputs asked for, parameters.

        Returns
        -------
        InferResult
            The outputs asked for, and the answer's method, levels and warnings as parameters.

        Raises
        ------
        V2Error
            400 for an output the bundle cannot give.
        APIError
            413 over the row limit.
        InputError
            The model's own input errors.
        """
        model, want = loaded.model, call.outputs
        inference.check_row_limit(call.features, "features", self.settings.max_rows)
        if TYPICALITY in want and model.typicality is None:
            if call.named:
                raise V2Error(400, f"output 'typicality' is not available: {NO_STEP}")
            want = tuple(name for name in want if name != TYPICALITY)
        t0 = time.perf_counter()
        level, adaptive, thresholds = self._level(call.coverage, loaded, call.method)
        answer = assessed = None
        strict = self.settings.strict_inputs
        if call.regions:
            answer = model.predict_region(call.features, call.method, level, kind="ellipsoid", centers=call.centers,
                                          thresholds=thresholds, strict=strict, device=call.device)
        if call.containment:
            assessed = model.assess(call.features, call.points, call.method, level, kind="ellipsoid",
                                    centers=call.centers, thresholds=thresholds, strict=strict, device=call.device)
        self.radio.observe(loaded, (answer or assessed).readings, call.device)
        regions = None if answer is None else answers.Batch(answer)
        results = None if assessed is None else answers.Batch(assessed)
        outputs = []
        for name in want:  # each from the answer that has it (typicality: the regions', when computed)
            field = answers.BY_NAME[name]
            batch = regions if regions is not None and answers.REGION in field.of else results
            outputs.append((name, field.tensor[0], field.value(batch)))
        answer = answer or assessed
        meta = self._reply("infer", loaded, answer, call.coverage, call.rows, t0, level, adaptive, thresholds).meta
        parameters = {key: meta[key] for key in ("method", "fallback", "coverage", "effective_coverage", "adaptive",
                                                 "bundle_id")}
        if answer.fallback_reason is not None:
            parameters["fallback_reason"] = answer.fallback_reason
        if answer.warnings:
            parameters["warnings"] = "; ".join(answer.warnings)
        return InferResult(loaded.name, loaded.version, call.id, parameters, outputs)

    def _reply(self, route: str, loaded: Loaded, answer, asked: float | None, rows: int, t0: float, level,
               adaptive: bool, thresholds) -> RegionReply:
        """The members beside an answer's rows; the request observed (metrics, shift test)."""
        self.shift.observe(loaded, answer.typicality_scores)
        self.observe(route, loaded.name, answer, rows, t0)
        model = loaded.model
        meta = {"method": answer.method, "fallback": answer.fallback, "fallback_reason": answer.fallback_reason,
                "coverage": asked if asked is not None else model.coverage,
                "effective_coverage": self._effective(level, answer, loaded, thresholds),
                "adaptive": adaptive, "bundle_id": loaded.version, "model": loaded.name,
                "warnings": list(answer.warnings)}
        if model.floors is not None:  # a floor bundle states its joint guarantee
            meta["guarantee"] = model.manifest["floors"]["guarantee"]
        return RegionReply(answer, meta, loaded)

    def observe(self, route: str, model: str, answer, rows: int, t0: float) -> None:
        """Count one answered request in the metrics: its compute time, its rows, a fallback.

        Parameters
        ----------
        route : str
            The route's name in the metrics.
        model : str
            The model's name.
        answer : Answer
            What the model answered.
        rows : int
            The request's rows.
        t0 : float
            ``time.perf_counter()`` when the computation began.
        """
        metrics = self.metrics
        metrics.child(metrics.inference, model, answer.method).observe(time.perf_counter() - t0)
        metrics.child(metrics.batch_rows, route, model).observe(rows)
        if answer.fallback:
            metrics.child(metrics.fallbacks, model, answer.method).inc()

    @staticmethod
    def _effective(level, answer, loaded: Loaded, thresholds) -> float:
        """The level the answer was computed at (quantile tracking: the calibration's level of its threshold)."""
        if thresholds is not None and answer.method in thresholds:
            return thresholds[answer.method][1]
        return level if level is not None else loaded.model.coverage

    def _level(self, asked: float | None, loaded: Loaded, method: str | None) -> tuple[float | None, bool, dict | None]:
        """The level to compute at, whether the adaptive mode chose it, and the thresholds it serves instead
        of the calibrated ones (quantile tracking): a level the request names is served as asked;
        otherwise the adaptive mode's (when on), else the bundle's."""
        monitor = self.monitor
        if asked is not None or not monitor.adaptive:
            return asked, False, None
        model = loaded.model
        name = method if method is not None and method in model.methods else model.primary_method
        thresholds = monitor.thresholds(loaded)
        if thresholds is not None:
            return None, True, thresholds
        return monitor.level(loaded, name), True, None

    # ------------------------------------------------------------------------------------------ feedback
    async def feedback(self, name: str | None, body, labels: dict | None = None) -> dict:
        """Record labelled rows against the served regions of the model ``name``.

        Parameters
        ----------
        name : str or None
            The model; ``None`` is the default model.
        body : FeedbackRequest
            Features, true points, centres, site and device.
        labels : dict, default=None
            The request's labels (:meth:`loaded`).

        Returns
        -------
        dict
            Rows recorded, the bundle, the worker, the monitor's summary and, per method, whether each point
            was inside and its p-value.

        Raises
        ------
        APIError
            404 or 503 as :meth:`loaded`; 413 over the row limit; 503 when the state cannot be reached (nothing is
            recorded).
        """
        loaded = self.loaded(name, None, labels)
        inference.check_row_limit(body.features, "features", self.settings.max_rows)
        monitor = self.monitor
        result = await anyio.to_thread.run_sync(monitor.record, loaded, body.features, body.points, body.centers,
                                                body.site, body.device)
        try:
            summary = await anyio.to_thread.run_sync(monitor.summary, loaded)
        except StateUnavailable as exc:  # the batch is committed: answer 200 (a 503 would say it was not)
            summary = {"unavailable": exc.reason}
        return {"recorded": result.rows, "bundle_id": loaded.version, "model": loaded.name, "worker_pid": os.getpid(),
                "monitor": summary,
                "methods": {m: {"inside": result.inside[m], "p_value": result.p_value[m],
                                "inside_served": result.inside_served[m]} for m in result.inside}}

