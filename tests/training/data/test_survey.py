"""training.data.site and lmve-train's --crs flags: the bundle's CRS (checked before any fit) and its survey."""

from __future__ import annotations

import numpy as np
import pytest

from models.bundle import load_bundle
from models.geo import TargetCRS
from tests.conftest import needs_data
from training.commands.train import main


@pytest.mark.slow
def test_crs_flags_reach_the_bundle_with_the_survey(tmp_path):
    out = tmp_path / "run"
    assert main(["--n-samples", "600", "--methods", "ge,nle", "--crs", "EPSG:32630", "--crs-axes", "yx",
                 "--crs-scale", "0.3048", "--out", str(out), "--quiet"]) == 0
    model = load_bundle(out / "bundle")
    assert model.crs == TargetCRS("EPSG:32630", axes="yx", scale=0.3048)
    survey = model.survey
    assert survey.counts.sum() == model.manifest["training"]["rows"]["train"] + \
        model.manifest["training"]["rows"]["calibration"]
    assert len(np.unique(survey.positions, axis=0)) == len(survey.positions)
    assert len(survey.example_points) == min(100, model.manifest["training"]["rows"]["test"])


@pytest.mark.slow
def test_a_plane_run_has_no_crs(tmp_path):
    assert main(["--n-samples", "600", "--methods", "ge", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    model = load_bundle(tmp_path / "run" / "bundle")
    assert model.crs is None and "crs" not in model.manifest and model.survey is not None


@pytest.mark.parametrize("flags, message", [
    (["--crs", "EPSG:4326"], "--crs: crs 'EPSG:4326' (WGS 84) is not projected"),
    (["--crs", "EPSG:0"], "--crs: crs 'EPSG:0' is not a coordinate reference system"),
    (["--crs-axes", "yx"], "--crs: --crs-axes and --crs-scale describe a CRS; name it"),
    (["--crs", "EPSG:3857", "--crs-scale", "-1"], "--crs-scale: crs scale must be a positive number")])
def test_bad_crs_flags_fail_before_any_fit_and_write_nothing(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert main(["--n-samples", "600", "--methods", "ge", "--out", str(out), "--quiet", *flags]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_a_floor_bundle_keeps_each_position_with_its_floor(tmp_path):
    out = tmp_path / "run"
    assert main(["--dataset", "floors", "--methods", "ge", "--floor-column", "floor", "--out", str(out),
                 "--quiet"]) == 0
    model = load_bundle(out / "bundle")
    survey = model.survey
    assert survey.floors is not None and set(np.unique(survey.floors)) == set(range(len(model.floors.labels)))
    assert survey.example_floors is not None and survey.example_floors.shape == (len(survey.example_points),)


@needs_data
def test_uji_declares_web_mercator_kilometres_northing_first():
    from training.data.datasets import load_dataset
    from training.data.site import crs_of

    ds = load_dataset("indoor_localization")
    crs = crs_of(ds, None, None, None)
    assert crs == TargetCRS("EPSG:3857", axes="yx", scale=1000.0)
    lon, lat = crs.to_lonlat(ds.Y[:500]).T  # Universitat Jaume I, Castello de la Plana
    assert (-0.070 < lon).all() and (lon < -0.063).all() and (39.990 < lat).all() and (lat < 39.996).all()
    assert crs_of(ds, "none", None, None) is None
