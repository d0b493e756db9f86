"""The hot routes, declared once: one table (:class:`HotRoute` entries) that yields both the route that
answers them (:class:`HotRoutes`) and their OpenAPI documentation (:func:`documented`).

A hot route is a plain Starlette endpoint ``async (request) -> Response`` that parses and checks its
own input: FastAPI's routing and request handler (included-router contexts, dependency resolution,
two exit stacks) cost a large share of a single-row request, which these routes do without.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Annotated, Callable

from fastapi import Path
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match, NoMatchFound, Route

#: the description of each path parameter a hot route may have
PATH_PARAMETERS = {
    "name": "a model of the repository (`GET /models` lists them)",
    "method": "a method of the model's bundle (`GET /models/{name}` lists them: lmve, nle, ge, ball, copula)",
    "version": "the bundle id the model serves (`GET /v2/models/{name}` gives it)",
}


@dataclass(frozen=True)
class HotRoute:
    """One ``POST`` route: its path template, its endpoint, and what its documentation says.

    ``body`` is the request body's ``openapi_extra`` (the routes parse their bodies themselves);
    ``responses`` the statuses it answers beyond 200, as FastAPI's ``responses``."""

    path: str
    endpoint: Callable
    summary: str
    response_model: type | None = None
    body: dict | None = None
    responses: dict = field(default_factory=dict)
    tags: tuple[str, ...] = ()

    @property
    def parts(self) -> list[str]:
        return self.path.split("/")

    @property
    def parameters(self) -> list[str]:
        return [p[1:-1] for p in self.parts if p.startswith("{")]


class _PlainRoute(Route):
    """A Starlette route that records itself as ``scope["route"]`` (the request metrics' label), as
    FastAPI's routes do."""

    def matches(self, scope):
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


class HotRoutes(BaseRoute):
    """Every :class:`HotRoute` of a table as one route.

    One matcher instead of one route each: a path is split on ``/`` and looked up by its shape (the
    number of segments and the last one, which the table's templates keep distinct), where Starlette's
    router would try each route's regular expression in turn. A path that is none of them is left to the
    routes after it; another method than POST on one of them is a partial match (405 unless a later route
    takes it). The matched route is
    ``scope["route"]``: the metrics' label."""

    def __init__(self, table: list[HotRoute]):
        self.table = list(table)
        #: (segments, leaf) -> (template parts, the route)
        self.routes: dict[tuple[int, str], _PlainRoute] = {}
        self._parts: dict[tuple[int, str], list[str]] = {}
        for entry in self.table:
            parts = entry.parts
            key = (len(parts) - 1, parts[-1])
            if key in self.routes or parts[-1].startswith("{"):
                raise ValueError(f"hot route {entry.path}: its shape {key} is taken or its last segment a parameter")
            self.routes[key] = _PlainRoute(entry.path, entry.endpoint, methods=["POST"])
            self._parts[key] = parts
        self._matched: _PlainRoute | None = None

    def matches(self, scope):
        if scope["type"] != "http":
            return Match.NONE, {}
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root + "/"):  # mounted under a prefix: match what follows it
            path = path[len(root):]
        parts = path.split("/")  # "/a/b" -> ["", "a", "b"]
        key = (len(parts) - 1, parts[-1])
        route = self.routes.get(key)
        if route is None or parts[0]:
            return Match.NONE, {}
        params = {}
        for got, want in zip(parts[1:-1], self._parts[key][1:-1]):
            if not got:
                return Match.NONE, {}
            if want[0] == "{":
                params[want[1:-1]] = got
            elif got != want:
                return Match.NONE, {}
        child = {"endpoint": route.endpoint, "route": route, "path_params": {**scope.get("path_params", {}), **params}}
        if scope["method"] != "POST":  # the router answers 405 unless a later route matches fully
            return Match.PARTIAL, child
        self._matched = route
        return Match.FULL, child

    @property
    def path_format(self) -> str | None:
        """The template of the route matched last (``/models/{name}/contains``): FastAPI's router reads
        ``path_format`` from the route right after a full match, with no ``await`` between, to name the
        request's OpenTelemetry span; routing runs on the one event loop, so that is this request's."""
        return None if self._matched is None else self._matched.path_format

    async def handle(self, scope, receive, send):
        route = scope["route"]
        if scope["method"] == "POST":
            await route.app(scope, receive, send)
        else:
            await route.handle(scope, receive, send)  # 405, with Allow: POST

    def url_path_for(self, name: str, /, **path_params):
        for route in self.routes.values():
            try:
                return route.url_path_for(name, **path_params)
            except NoMatchFound:
                pass
        raise NoMatchFound(name, path_params)


def _signature(names: list[str]) -> inspect.Signature:
    return inspect.Signature([inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY,
                                                annotation=Annotated[str, Path(description=PATH_PARAMETERS.get(n, n))])
                              for n in names])


def documented(table: list[HotRoute]) -> list[APIRoute]:
    """The table as FastAPI routes for the OpenAPI document only (never added to a router): each declares
    its path parameters, body, response model and statuses."""
    out = []
    for entry in table:
        async def endpoint(**kwargs):  # pragma: no cover - documentation only, never called
            raise NotImplementedError

        endpoint.__signature__ = _signature(entry.parameters)
        out.append(APIRoute(entry.path, endpoint, methods=["POST"], response_model=entry.response_model,
                            responses=entry.responses, summary=entry.summary, openapi_extra=entry.body,
                            tags=list(entry.tags), name=entry.path,
                            operation_id=("post" + entry.path).replace("/", "_").replace("{", "").replace("}", "")))
    return out
