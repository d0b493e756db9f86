"""Prometheus metrics, one registry per app (so tests can build many apps in one process).

Every family carries the ``model`` label: the name of the model that answered (``""`` on routes
that answer for no model: health, metrics, a refused request, an unknown model's 404). Its values
are the repository's names only, never a name a client sent that no model has."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

#: request latency buckets (seconds), REST and gRPC alike
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self._children: dict = {}
        r = self.registry
        self.requests = Counter("lmve_http_requests", "HTTP requests by route and status",
                                ["route", "method", "status", "model"], registry=r)
        self.latency = Histogram("lmve_http_request_duration_seconds", "Request latency by route", ["route", "model"],
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("lmve_batch_rows", "Rows per inference request", ["route", "model"],
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096), registry=r)
        self.inference = Histogram("lmve_inference_seconds", "Model computation time per request", ["model", "method"],
                                   buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1, 0.5, 1), registry=r)
        self.grpc_requests = Counter("lmve_grpc_requests", "gRPC calls by method and status code",
                                     ["rpc", "code", "model"], registry=r)
        self.grpc_latency = Histogram("lmve_grpc_request_duration_seconds", "gRPC call latency by method",
                                      ["rpc", "model"], buckets=LATENCY_BUCKETS, registry=r)
        self.model_info = Info("lmve_model", "Each model's served bundle", ["model"], registry=r)
        self.model_ready = Gauge("lmve_model_ready", "1 when a verified bundle is served, 0 while the model cannot "
                                 "serve (unloaded models have none)", ["model"], registry=r)
        self.reloads = Counter("lmve_reloads", "Bundle loads and reloads by result", ["model", "result"], registry=r)
        self.rejected = Counter("lmve_rejected", "Requests refused before reaching a route", ["reason"],
                                registry=r)
        self.fallbacks = Counter("lmve_fallbacks", "Responses served by a fallback method", ["model", "method"],
                                 registry=r)

    def child(self, metric, *labels):
        """``metric.labels(*labels)``, memoised: ``labels()`` validates and locks on every call,
        a measurable share of a single-row request. The label sets are few (routes, methods,
        statuses), so the memo stays small."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def set_model(self, name: str, loaded, unloaded: bool = False) -> None:
        """Model ``name`` now serves ``loaded`` (``None``: it cannot serve; ``unloaded``: an operator
        unloaded it, and its info and readiness series go)."""
        if loaded is None:
            try:
                self.model_info.remove(name)
            except KeyError:
                pass
            if unloaded:
                try:
                    self.model_ready.remove(name)
                except KeyError:
                    pass
            else:
                self.model_ready.labels(name).set(0)
            return
        m = loaded.model.manifest
        self.model_info.labels(name).info({
            "version": loaded.version, "dataset": str(m.get("dataset", {}).get("name")),
            "primary_method": loaded.model.primary_method, "d": str(m.get("d")), "n": str(m.get("n")),
            "coverage": str(m.get("coverage"))})
        self.model_ready.labels(name).set(1)


class StateCollector:
    """A custom Prometheus collector read from the shared state at each scrape, so that any worker answers the
    same: :meth:`families` names its metric families (the same at every scrape: ``describe``), and a
    subclass's ``collect`` fills them for the models loaded now (:meth:`loaded`). ``source`` is what it reads
    (the feedback monitor, the shift alarm); ``repository`` the served models."""

    def __init__(self, source, repository):
        self.source, self.repository = source, repository

    @staticmethod
    def families() -> dict:
        """``key -> metric family``, empty (a subclass names its own)."""
        return {}

    def describe(self):
        return list(self.families().values())

    def loaded(self, keep=None) -> dict:
        """``name -> Loaded`` of every model serving now (and, with ``keep``, for which ``keep(loaded)``)."""
        return {name: s.current for name, s in list(self.repository.stores.items())
                if s.current is not None and (keep is None or keep(s.current))}
