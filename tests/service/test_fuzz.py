"""Schemathesis: requests generated from the OpenAPI schema never get a 5xx."""

from __future__ import annotations

import sys

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402

from service.app import create_app  # noqa: E402
from service.settings import ServiceSettings  # noqa: E402
from service.store import ModelStore  # noqa: E402

COUNT = {"cases": 0, "server_errors": 0}


@pytest.fixture(scope="module")
def api_schema(bundle_dir):
    store = ModelStore(bundle_dir)
    store.reload()
    app = create_app(ServiceSettings(bundle=bundle_dir, api_key="fuzz"), store=store)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    print(f"\nschemathesis: {COUNT['cases']} generated cases, {COUNT['server_errors']} server errors",
          file=sys.__stderr__)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_error_for_any_generated_request(case):
    for headers in ({"X-API-Key": "fuzz"}, {}):  # with and without the key
        response = case.call(headers=headers)
        COUNT["cases"] += 1
        if response.status_code >= 500:
            COUNT["server_errors"] += 1
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])
