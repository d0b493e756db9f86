"""The hot route table (service.routing): one matcher answers exactly what Starlette's routes would, under
a root path too, and names the template it matched; the same table documents the routes."""

from __future__ import annotations

import pytest

from service.routers import hot_table
from service.routing import HotRoute, HotRoutes


PATHS = ["/predict-region", "/contains", "/nle/predict-region", "/ge/contains", "/models/predict-region",
         "/models/site-a/predict-region", "/models/site-a/contains", "/models/BUILDINGID=1/nle/predict-region",
         "/models/a b/ge/contains", "/models/x/y/z/contains", "/other/x/predict-region", "/predict-region/",
         "//predict-region", "/models//contains", "/models/x//contains", "/contains/extra", "/predict", "/",
         "/lmve/predict-region/", "/model", "/models/x", "/prefix/predict-region",
         # the V2 infer routes
         "/v2/models/s/infer", "/v2/models/BUILDINGID=1/versions/abc/infer", "/v2/models/s/x/infer",
         "/v2/model/s/infer", "/v1/models/s/infer", "/v2/models//infer", "/v2/models/s/version/abc/infer",
         "/v2/models/s/versions//infer", "/models/s/x/infer", "/v2/models/s/predict-region", "/x/v2/models/s/infer",
         "/v2/models/s/infer/", "/v2/infer"]


@pytest.mark.parametrize("method", ["POST", "GET"])
@pytest.mark.parametrize("path", PATHS)
def test_region_dispatch_matches_like_starlettes_routes(path, method):
    """service.routing.HotRoutes looks a path up by its shape; it must answer exactly the
    requests that Starlette's ten regex routes (tried in order) answer, with the same parameters."""
    from starlette.routing import Match

    dispatch = HotRoutes(hot_table())
    scope = {"type": "http", "path": path, "root_path": "", "method": method}
    expected = next(((r, child) for r in dispatch.routes.values()
                     for m, child in [r.matches(scope)] if m == Match.FULL), (None, None))
    match, child = dispatch.matches(scope)
    if expected[0] is None and method != "POST":  # the path matched, the method did not: a 405 to come
        partial = next((r for r in dispatch.routes.values() if r.matches(scope)[0] == Match.PARTIAL), None)
        assert match == (Match.NONE if partial is None else Match.PARTIAL), path
    elif expected[0] is None:
        assert match == Match.NONE, path
    else:
        assert match == Match.FULL and child["route"] is expected[0], path
        assert child["path_params"] == expected[1]["path_params"] and child["endpoint"] is expected[0].endpoint


def test_region_dispatch_under_a_root_path():
    from starlette.routing import Match

    match, child = HotRoutes(hot_table()).matches({"type": "http", "path": "/api/models/s/nle/contains", "root_path": "/api",
                                           "method": "POST"})
    assert match == Match.FULL and child["path_params"] == {"name": "s", "method": "nle"}
    assert child["route"].path == "/models/{name}/{method}/contains"


def test_region_dispatch_names_the_matched_template():
    """FastAPI's telemetry reads ``path_format`` from the route right after it matched (the span's name)."""
    dispatch = HotRoutes(hot_table())
    for path, template in (("/models/a/nle/contains", "/models/{name}/{method}/contains"),
                           ("/predict-region", "/predict-region"), ("/ge/contains", "/{method}/contains")):
        dispatch.matches({"type": "http", "path": path, "root_path": "", "method": "POST"})
        assert dispatch.path_format == template


def test_a_table_whose_shapes_collide_is_refused():
    async def endpoint(request):  # pragma: no cover - never called
        return None

    with pytest.raises(ValueError, match="taken"):
        HotRoutes([HotRoute("/a/{x}/infer", endpoint, "s"), HotRoute("/b/{y}/infer", endpoint, "s")])


def test_every_hot_route_is_documented_with_its_path_parameters(client):
    spec = client.get("/openapi.json").json()
    for entry in hot_table():
        operation = spec["paths"][entry.path]["post"]
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == set(entry.parameters), entry.path
        assert operation["requestBody"]["required"] is True
