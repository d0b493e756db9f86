"""Schemathesis: requests generated from the OpenAPI schema never get a 5xx.

Uses schemathesis's per-operation hypothesis strategies directly (its pytest plugin's
``from_fixture`` does not run under pytest 9), against the real app over ASGI.
"""

from __future__ import annotations

import pytest
import schemathesis  # a dev dependency: CI must fuzz, never skip
from hypothesis import HealthCheck, given, settings

from service.app import create_app
from service.settings import ServiceSettings
from service.store import ModelStore

EXAMPLES_PER_OPERATION = 60


@pytest.mark.slow
def test_no_server_error_for_any_generated_request(bundle_dir, capsys, tmp_path):
    store = ModelStore(bundle_dir)
    store.reload()
    # a generous request timeout: this test hunts for bugs (5xx), not for a slow shared machine's 504s;
    # recalibrations the fuzzer manages to make land in tmp_path, not beside the shared bundle
    app = create_app(ServiceSettings(bundle=bundle_dir, api_key="fuzz", request_timeout_s=120,
                                     recalibrated_dir=tmp_path), store=store)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 8
    count = {"cases": 0}
    failures = []
    for op in operations:

        @given(case=op.as_strategy())
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def check(case):
            if case.path.startswith("/v2/models/"):  # the served model: the body's decoding is what is fuzzed
                case.path_parameters = {**(case.path_parameters or {}), "name": store.name}
            for headers in ({"X-API-Key": "fuzz"}, {}):  # with and without the key
                response = case.call(headers=headers)
                count["cases"] += 1
                if response.status_code >= 500:
                    failures.append((case.method, case.path, case.body, response.status_code, response.text[:200]))
                assert response.status_code < 500

        check()
    line = (f"schemathesis: {count['cases']} generated requests over {len(operations)} operations, "
            f"{len(failures)} server errors")
    with capsys.disabled():  # into the test log itself, past pytest's output capture
        print("\n" + line)
    assert not failures and count["cases"] > 100
