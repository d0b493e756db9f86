"""service.dataplane: one count of requests in flight, and the lookup that records a request's model."""

from __future__ import annotations

import pytest

from service.dataplane import MODEL_LABEL, InFlight
from service.exceptions import APIError


def test_in_flight_admits_up_to_its_limit_and_again_after_a_leave():
    in_flight = InFlight(2)
    assert in_flight.enter() and in_flight.enter()
    assert not in_flight.enter() and in_flight.count == 2  # a refusal counts nothing
    in_flight.leave()
    assert in_flight.enter() and in_flight.count == 2
    assert in_flight.refusal() == "2 requests are already in flight (LMVE_MAX_CONCURRENCY); retry shortly"


def test_the_plane_records_the_model_before_readiness_and_refuses_an_unknown_one(make_client):
    plane = make_client(max_concurrency=3).app.state.plane
    assert plane.in_flight.limit == 3  # the one limit the REST guards and gRPC share
    labels = {}
    loaded = plane.loaded(None, None, labels)
    assert labels[MODEL_LABEL] == loaded.name and plane.loaded(loaded.name, loaded.version).version == loaded.version
    with pytest.raises(APIError) as unknown:
        plane.loaded("nope", None, labels)
    assert unknown.value.status == 404 and labels[MODEL_LABEL] == loaded.name
