"""GET /model/survey-map and /models/{name}/survey-map: the bundle's survey map as GeoJSON, a plan with add=N."""

from __future__ import annotations

import numpy as np
import pytest

from tests.models.test_survey_geojson import assert_rfc7946


@pytest.fixture()
def survey_client(make_client, survey_bundle):
    return make_client(bundle=survey_bundle[0])


@pytest.mark.slow
def test_the_map_is_wgs84_geojson_of_the_bundles_survey(survey_client, survey_bundle):
    from models.survey_map import survey_map

    _, result, _ = survey_bundle
    r = survey_client.get("/model/survey-map")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/geo+json")
    doc = r.json()
    assert_rfc7946(doc, wgs84=True)
    expected = survey_map(result.model.survey, method=result.model.primary_method)
    cells = [f for f in doc["features"] if f["properties"]["kind"] == "cell"]
    assert len(cells) == len(expected.centres) and doc["method"] == result.model.primary_method
    assert doc["model"] == "site" and doc["accuracy"] == expected.accuracy
    lon, lat = np.asarray(cells[0]["geometry"]["coordinates"][0])[0]
    assert -0.2 < lon < 0.2 and 39.9 < lat < 40.1  # Castello, from UTM 30N
    named = survey_client.get("/models/site/survey-map", params={"cells": 12, "coordinates": "plane"}).json()
    assert named["coordinates"] == "plane" and len(named["features"]) < len(cells)


@pytest.mark.slow
def test_add_plans_positions_inside_the_extent_in_walking_order(survey_client, survey_bundle):
    from models.survey_map import Extent

    _, result, _ = survey_bundle
    doc = survey_client.get("/model/survey-map", params={"add": 7, "seed": 3, "coordinates": "plane"}).json()
    proposals = [f for f in doc["features"] if f["properties"]["kind"] == "proposal"]
    assert [f["properties"]["order"] for f in proposals] == list(range(1, 8))
    P = np.array([f["geometry"]["coordinates"] for f in proposals])
    survey = result.model.survey
    from models.survey_map import spacing

    extent = Extent.of_survey(survey.positions, spacing(survey.positions) / 2)
    assert extent.contains(P).all()
    again = survey_client.get("/model/survey-map", params={"add": 7, "seed": 3, "coordinates": "plane"}).json()
    assert again["features"] == doc["features"]  # deterministic given the seed
    walk = [f for f in doc["features"] if f["properties"]["kind"] == "walk"]
    assert walk[0]["geometry"]["coordinates"] == P.tolist()


@pytest.mark.slow
def test_bad_parameters_and_a_bundle_without_a_map_are_refused_by_name(survey_client, client):
    for params, field in (({"cells": 1}, "cells"), ({"add": -1}, "add"), ({"coordinates": "utm"}, "coordinates"),
                          ({"floor": 0}, "floor")):
        r = survey_client.get("/model/survey-map", params=params)
        assert r.status_code == 422, (params, r.text)
        assert field in r.text
    r = client.get("/model/survey-map")  # the row-protocol bundle: not a survey
    assert r.status_code == 409 and "retrain" in r.json()["detail"]
    assert client.get("/models/nope/survey-map").status_code == 404
