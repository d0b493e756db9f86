"""The table of answers: every surface (JSON rows, their schema, GeoJSON properties, lmve-predict columns,
V2 tensors) carries what the table declares, and a new entry reaches all of them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from models import answers
from models.answers import CONTAINS, REGION, SAME, Batch, Output


@pytest.fixture(scope="module")
def answered(trained_synthetic):
    result, ds = trained_synthetic
    model = result.model
    X, Y = ds.X[:7], ds.Y[:7]
    return model, model.predict_region(X, kind="ellipsoid"), model.assess(X, Y, kind="ellipsoid")


def test_json_rows_hold_each_field_of_the_table_and_validate_against_the_derived_schema(answered):
    from service.schemas import ContainsResult, Region

    model, region, assessed = answered
    rows = answers.rows(Batch(region, boundary_points=8), REGION)
    expected = [f.name for f in answers.fields(REGION) if f.name != "floors"]  # no floor model: left out
    assert len(rows) == 7 and all(list(row) == expected for row in rows)
    assert set(Region.model_fields) == {f.name for f in answers.fields(REGION)}
    for row in rows:
        Region.model_validate(row)
        assert np.isclose(row["volume"], np.pi * np.prod(row["semi_axes"]), rtol=1e-12)
        assert len(row["boundary"]) == 9 and row["boundary"][0] == row["boundary"][-1]
    results = answers.rows(Batch(assessed), CONTAINS)
    assert all(list(row) == ["inside", "distance", "p_value", "typicality"] for row in results)
    assert [row["inside"] for row in results] == (assessed.distance <= 1).tolist()
    assert set(ContainsResult.model_fields) == {f.name for f in answers.fields(CONTAINS)}
    for row in results:
        ContainsResult.model_validate(row)


def test_geojson_properties_and_predict_columns_follow_the_table(answered):
    model, region, assessed = answered
    batch = Batch(region, model)
    props = answers.properties(batch)
    geo = [f.name for f in answers.fields(REGION, "geo") if f.name not in ("floors", "bearing_deg")]
    assert all(list(p) == geo for p in props) and [p["row"] for p in props] == list(range(7))
    volume = batch.volumes
    assert np.allclose([p["area_m2"] for p in props], volume, rtol=1e-12)  # no CRS: target units
    cols = answers.columns(batch, REGION) | answers.columns(Batch(assessed, model), CONTAINS)
    names = [*(f"center_{t}" for t in model.target_names), "shape_00", "shape_01", "shape_11", "area", "accuracy",
             "method", "typicality", "inside", "distance", "p_value"]
    assert list(cols) == names
    assert np.array_equal(cols["area"], region.regions.volume("lebesgue"))
    assert np.array_equal(cols["shape_01"], region.regions.shapes[:, 0, 1])


def test_v2_tensors_are_the_table_entries_with_a_tensor():
    from service.open_inference import tensors

    assert tensors.OUTPUTS == ("center", "shape", "volume", "inside", "distance", "p_value", "typicality")
    assert tensors.REGION_OUTPUTS == ("center", "shape", "volume")
    assert tensors.CONTAINMENT_OUTPUTS == ("inside", "distance", "p_value")
    assert [tensors.datatype_of(n) for n in tensors.OUTPUTS] == ["FP64"] * 3 + ["BOOL"] + ["FP64"] * 3


def test_a_new_entry_reaches_every_surface(answered, monkeypatch):
    """Adding a field is one entry: the JSON rows, their schema, GeoJSON and lmve-predict carry it."""
    from service.schemas import answer_schema

    model, region, _ = answered
    spread = Output("spread", frozenset({REGION}), "twice the area", float, lambda b: 2 * b.volumes, geo=SAME,
                    columns=lambda b: {"spread": 2 * b.volumes})
    monkeypatch.setattr(answers, "FIELDS", answers.FIELDS + (spread,))
    batch = Batch(region, model)
    doubled = (2 * batch.volumes).tolist()
    assert [row["spread"] for row in answers.rows(batch, REGION)] == doubled
    assert [p["spread"] for p in answers.properties(batch)] == doubled
    assert answers.columns(batch, REGION)["spread"].tolist() == doubled
    schema = answer_schema(REGION, "RegionWithSpread", "test")
    assert schema.model_fields["spread"].description == "twice the area"
    assert schema.model_fields["spread"].is_required()
    # a tensor is one more attribute of the same entry
    monkeypatch.setattr(answers, "FIELDS", answers.FIELDS[:-1] + (dataclasses.replace(spread, tensor=("FP64", ())),))
    assert answers.tensor_names(REGION)[-1] == "spread"


def test_an_unbounded_row_has_null_map_figures(answered):
    model, region, _ = answered
    shapes = region.regions.shapes.copy()
    shapes[2] = np.inf
    unbounded = dataclasses.replace(region, regions=dataclasses.replace(region.regions, shapes=shapes))
    props = answers.properties(Batch(unbounded, model))
    assert props[2]["center"] is None and props[2]["area_m2"] is None and props[1]["area_m2"] is not None
    assert Batch(unbounded, model).figure("ring")[2] is None
