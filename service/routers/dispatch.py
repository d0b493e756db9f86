"""The hot routes as one Starlette route: the eight region routes and the V2 ``infer`` routes.

FastAPI's routing and request handler (included-router contexts, dependency resolution, two exit
stacks) cost about 40 us of a single-row request, which plain routes do without: their endpoints
parse and check their own input. :class:`InferenceRoutes` sits ahead of FastAPI's routes
(``create_app`` inserts it first) and answers the requests, while the FastAPI routes of
:mod:`service.routers.regions` and :mod:`service.routers.v2` document them (OpenAPI).
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Match, NoMatchFound, Route

from service.routers.regions import contains, contains_with, predict_region, predict_region_with
from service.routers.v2 import infer


class _PlainRoute(Route):
    """A Starlette route that records itself as ``scope["route"]`` (the request metrics' label), as
    FastAPI's routes do."""

    def matches(self, scope):
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


async def _predict_region_with(request):
    return await predict_region_with(request.path_params["method"], request)


async def _contains_with(request):
    return await contains_with(request.path_params["method"], request)


class InferenceRoutes(BaseRoute):
    """``/predict-region``, ``/contains``, their ``/{method}/`` twins, the same four under
    ``/models/{name}/``, and ``/v2/models/{name}[/versions/{version}]/infer``, as one route.

    One matcher instead of ten routes: a path is split on ``/`` and looked up by its shape (the number
    of segments and the last one), where Starlette's router would try each route's regular expression
    in turn (a ``/models/{name}/{method}/contains`` request failed seven before it matched). A path
    that is none of them, or a method other than POST, is left to the routes after it (which answer
    404 or 405). The matched :class:`_PlainRoute` is ``scope["route"]``: the metrics' label."""

    def __init__(self):
        def route(path, endpoint):
            return _PlainRoute(path, endpoint, methods=["POST"])

        # (segments, leaf) -> route; the segments before the leaf: [] plain, [method], [models, name],
        # [models, name, method]; [v2, models, name] and [v2, models, name, versions, version]
        self.routes = {
            (1, "predict-region"): route("/predict-region", predict_region),
            (1, "contains"): route("/contains", contains),
            (2, "predict-region"): route("/{method}/predict-region", _predict_region_with),
            (2, "contains"): route("/{method}/contains", _contains_with),
            (3, "predict-region"): route("/models/{name}/predict-region", predict_region),
            (3, "contains"): route("/models/{name}/contains", contains),
            (4, "predict-region"): route("/models/{name}/{method}/predict-region", _predict_region_with),
            (4, "contains"): route("/models/{name}/{method}/contains", _contains_with),
            (4, "infer"): route("/v2/models/{name}/infer", infer),
            (6, "infer"): route("/v2/models/{name}/versions/{version}/infer", infer)}
        self._matched: _PlainRoute | None = None

    @staticmethod
    def _params(parts: list[str], n: int, leaf: str) -> dict | None:
        """The path parameters of a path split into ``parts`` (``None``: not one of these routes)."""
        if leaf == "infer":
            if parts[1] != "v2" or parts[2] != "models" or (n == 6 and parts[4] != "versions"):
                return None
            return {"name": parts[3]} if n == 4 else {"name": parts[3], "version": parts[5]}
        if n >= 3 and parts[1] != "models":
            return None
        return ({} if n == 1 else {"method": parts[1]} if n == 2 else {"name": parts[2]} if n == 3 else
                {"name": parts[2], "method": parts[3]})

    def matches(self, scope):
        if scope["type"] != "http" or scope["method"] != "POST":
            return Match.NONE, {}
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root + "/"):  # mounted under a prefix: match what follows it
            path = path[len(root):]
        parts = path.split("/")  # "/a/b" -> ["", "a", "b"]
        n = len(parts) - 1
        route = self.routes.get((n, parts[-1]))
        if route is None or parts[0] or not all(parts[1:-1]):
            return Match.NONE, {}
        params = self._params(parts, n, parts[-1])
        if params is None:
            return Match.NONE, {}
        self._matched = route
        return Match.FULL, {"endpoint": route.endpoint, "route": route,
                            "path_params": {**scope.get("path_params", {}), **params}}

    @property
    def path_format(self) -> str | None:
        """The template of the route matched last (``/models/{name}/contains``): FastAPI's router reads
        ``path_format`` from the route right after a full match, with no ``await`` between, to name the
        request's OpenTelemetry span; routing runs on the one event loop, so that is this request's."""
        return None if self._matched is None else self._matched.path_format

    async def handle(self, scope, receive, send):
        await scope["route"].app(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params):
        for route in self.routes.values():
            try:
                return route.url_path_for(name, **path_params)
            except NoMatchFound:
                pass
        raise NoMatchFound(name, path_params)
