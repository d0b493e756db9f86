import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from models.bundle import SCHEMA_VERSION, load_bundle, read_manifest, save_bundle, write_file_atomic
from models.exceptions import BundleError


def test_round_trip_gives_identical_predictions(trained_synthetic, bundle_dir):
    result, ds = trained_synthetic
    loaded = load_bundle(bundle_dir)
    X = ds.X[result.split.test]
    Y = ds.Y[result.split.test]
    assert set(loaded.methods) == {"ge", "nle", "lmve", "ball", "copula"}
    for name in loaded.methods:
        a = result.model.predict_region(X, method=name).regions
        b = loaded.predict_region(X, method=name).regions
        np.testing.assert_array_equal(a.centers, b.centers)
        if a.kind == "ellipsoid":
            np.testing.assert_array_equal(a.shapes, b.shapes)
        else:
            np.testing.assert_array_equal(a.half_widths, b.half_widths)
        assert a.alpha_q == b.alpha_q
        np.testing.assert_array_equal(result.model.assess(X, Y, name).p_value, loaded.assess(X, Y, name).p_value)
        # another level from the stored scores, no refit
        assert (result.model.predict_region(X, name, 0.8).regions.alpha_q
                == loaded.predict_region(X, name, 0.8).regions.alpha_q)


def test_manifest_records_what_the_issue_asks(bundle_dir, trained_synthetic):
    m = read_manifest(bundle_dir)
    assert m["schema_version"] == SCHEMA_VERSION
    assert {"numpy", "torch", "scikit-learn", "python", "lmve"} <= set(m["versions"])
    assert m["dataset"]["name"] == "synthetic" and len(m["dataset"]["sha256"]) == 64
    assert m["d"] == 16 and m["n"] == 2 and m["coverage"] == 0.9
    assert set(m["files"]) == {"scaler.npz", "centre.npz", "calibration.npz", "ge.npz", "nle.npz", "lmve.npz",
                               "ball.npz", "copula.npz", "typicality.npz", "readings.npz", "survey.npz",
                               "radio.npz"}
    assert m["radio"]["file"] == "radio.npz" and m["radio"]["rows"] > 0
    assert m["readings"]["rssi_features"] == 16 and m["readings"]["file"] == "readings.npz"
    for name, entry in m["methods"].items():
        assert entry["alpha_q"] == pytest.approx(trained_synthetic[0].model.methods[name].alpha_q_)
    assert m["metrics"]["lmve"]["coverage"] == trained_synthetic[0].metrics["lmve"]["coverage"]


@pytest.fixture()
def copy_of(bundle_dir, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(bundle_dir, dst)
    return dst


def test_tampered_file_is_refused_and_named(copy_of):
    data = bytearray((copy_of / "lmve.npz").read_bytes())
    data[-10] ^= 0xFF
    (copy_of / "lmve.npz").write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"lmve\.npz does not match the manifest") as info:
        load_bundle(copy_of)
    assert info.value.path.endswith("lmve.npz")


def test_missing_file_is_refused(copy_of):
    (copy_of / "nle.npz").unlink()
    with pytest.raises(BundleError, match=r"nle\.npz is listed in the manifest but missing"):
        load_bundle(copy_of)


def test_unknown_schema_version_is_refused(copy_of):
    m = json.loads((copy_of / "manifest.json").read_text())
    m["schema_version"] = 99
    (copy_of / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="schema_version 99; this lmve reads schema_version 2"):
        load_bundle(copy_of)


def test_garbage_manifest_and_missing_directory(copy_of, tmp_path):
    (copy_of / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        load_bundle(copy_of)
    with pytest.raises(BundleError, match="does not exist"):
        load_bundle(tmp_path / "nowhere")
    with pytest.raises(BundleError, match="cannot be read: File name too long"):  # a 500 before, under fuzzing
        load_bundle(tmp_path / ("x" * 300))


def test_manifest_cannot_point_outside_the_bundle(copy_of):
    m = json.loads((copy_of / "manifest.json").read_text())
    m["files"]["../../etc/passwd"] = "0" * 64
    (copy_of / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="unsafe file name"):
        load_bundle(copy_of)


def test_failed_write_leaves_the_good_bundle_untouched(trained_synthetic, copy_of):
    before = {p.name: p.read_bytes() for p in copy_of.iterdir()}
    model = trained_synthetic[0].model
    broken = type(model)(**{**model.__dict__, "methods": dict(model.methods)})
    broken.methods["ge"] = type(model.methods["ge"])(shape=model.methods["ge"].shape)  # never fitted
    with pytest.raises(AttributeError):
        save_bundle(broken, copy_of)
    assert {p.name: p.read_bytes() for p in copy_of.iterdir()} == before
    assert [p.name for p in copy_of.parent.iterdir()] == ["bundle"]  # no temp directory left
    load_bundle(copy_of)


def test_overwrite_replaces_atomically(trained_synthetic, copy_of):
    save_bundle(trained_synthetic[0].model, copy_of, dataset={"name": "again"})
    assert read_manifest(copy_of)["dataset"]["name"] == "again"
    assert [p.name for p in copy_of.parent.iterdir()] == ["bundle"]


def test_a_single_file_is_replaced_whole_or_left_as_it_was(tmp_path):
    path = tmp_path / "deep" / "plan.csv"
    write_file_atomic(path, b"x,y\n1,2\n")
    write_file_atomic(path, b"x,y\n3,4\n")
    assert path.read_bytes() == b"x,y\n3,4\n"
    with pytest.raises(TypeError):  # fails inside the write, after the temporary file exists
        write_file_atomic(path, "not bytes")
    assert path.read_bytes() == b"x,y\n3,4\n"
    assert [p.name for p in path.parent.iterdir()] == ["plan.csv"]


@pytest.mark.slow
@pytest.mark.parametrize("centre", ["paper", "scaled", "knn", "hgb", "mlp", "stack"])
def test_every_centre_kind_round_trips_through_a_bundle(centre, tmp_path):
    """Each registered centre, trained by the pipeline, stored and loaded: identical regions."""
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    ds = load_dataset("synthetic", n_samples=400, seed=1)
    params = {"max_steps": 300, "eval_every": 50} if centre == "mlp" else {}
    params = {"members": ("scaled", "knn", "hgb")} if centre == "stack" else params
    result = train(ds, TrainConfig(seed=0, methods=("ge", "nle"), centre=centre, centre_params=params))
    save_bundle(result.model, tmp_path / "b", dataset=ds.info)
    again = load_bundle(tmp_path / "b")
    assert type(again.centre).__name__ == type(result.model.centre).__name__
    X = ds.X[result.split.test]
    np.testing.assert_array_equal(again.predict_center(X), result.model.predict_center(X))
    a, b = result.model.predict_region(X), again.predict_region(X)
    np.testing.assert_array_equal(a.regions.shapes, b.regions.shapes)


@pytest.mark.slow
def test_lmve_learned_centre_round_trips_through_a_bundle(tmp_path):
    """LMVE with a mean head (its own centre correction), stored and loaded: identical centres, shapes,
    containment and p-values, and the stored centre is not the shared one."""
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    ds = load_dataset("synthetic", n_samples=500, seed=2)
    config = TrainConfig(seed=0, methods=("ge", "nle", "lmve"), centre="scaled",
                         method_params={"lmve": {"mean_head": True, "max_steps": 200, "eval_every": 25,
                                                  "init_candidates": False}})
    result = train(ds, config)
    save_bundle(result.model, tmp_path / "b", dataset=ds.info)
    again = load_bundle(tmp_path / "b")
    assert again.methods["lmve"].shape_.moves_centre
    X, Y = ds.X[result.split.test], ds.Y[result.split.test]
    a, b = result.model.predict_region(X, method="lmve"), again.predict_region(X, method="lmve")
    np.testing.assert_array_equal(a.regions.centers, b.regions.centers)
    np.testing.assert_array_equal(a.regions.shapes, b.regions.shapes)
    assert not np.allclose(a.regions.centers, again.predict_center(X))  # the trained head moved the centre
    np.testing.assert_array_equal(again.assess(X, Y, method="lmve").p_value,
                                  result.model.assess(X, Y, method="lmve").p_value)


FIXTURE = Path(__file__).resolve().parent.parent / "fixtures"


def test_a_bundle_written_before_the_packages_loads_and_answers_as_it_did():
    """tests/fixtures/bundle_v2 was written at the commit its answers name, before models/ became
    packages (tests/fixtures/make_bundle_v2.py): today's loader reads it and every method gives the
    regions and p-values it gave then (to rounding: another CPU's BLAS may differ in the last bits)."""
    expected = json.loads((FIXTURE / "bundle_v2_answers.json").read_text())
    model = load_bundle(FIXTURE / "bundle_v2")
    assert type(model.centre).__name__ == "StackCentre" and set(model.methods) == set(expected["methods"])
    X, Y = np.array(expected["features"]), np.array(expected["points"])
    for name, want in expected["methods"].items():
        region = model.predict_region(X, method=name).regions
        assert region.kind == want["kind"]
        assert region.alpha_q == pytest.approx(want["alpha_q"], rel=1e-12)
        assert model.predict_region(X, name, 0.8).regions.alpha_q == pytest.approx(want["alpha_q_at_0.8"], rel=1e-12)
        np.testing.assert_allclose(region.centers, want["centers"], rtol=1e-10, atol=1e-12)
        got = region.shapes if region.kind == "ellipsoid" else region.half_widths
        np.testing.assert_allclose(got, want["shapes" if region.kind == "ellipsoid" else "half_widths"],
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(model.assess(X, Y, name).p_value, want["p_value"], rtol=1e-10, atol=1e-12)


def test_crs_and_survey_round_trip_and_survive_recalibration(trained_synthetic, tmp_path):
    from dataclasses import replace

    from models.geo import TargetCRS
    from models.survey import EXAMPLES, Survey

    result, ds = trained_synthetic
    split = result.split
    survey = Survey.of(ds.Y[split.train], None, ds.X[split.test], ds.Y[split.test], None)
    model = replace(result.model, crs=TargetCRS("EPSG:32630"), survey=survey)
    manifest = save_bundle(model, tmp_path / "b")
    assert manifest["crs"]["crs"] == "EPSG:32630" and manifest["crs"]["name"] == "WGS 84 / UTM zone 30N"
    positions = np.unique(ds.Y[split.train], axis=0)
    assert manifest["survey"] == {"file": "survey.npz", "positions": len(positions), "rows": len(split.train),
                                  "examples": min(EXAMPLES, len(split.test))}
    back = load_bundle(tmp_path / "b")
    assert back.crs == model.crs
    assert np.array_equal(back.survey.positions, positions) and back.survey.floors is None
    assert back.survey.example_features.shape == (manifest["survey"]["examples"], ds.X.shape[1])
    rows = {tuple(r) for r in np.column_stack([ds.X[split.test], ds.Y[split.test]])}
    assert all(tuple(r) in rows for r in np.column_stack([back.survey.example_features, back.survey.example_points]))
    fresh = back.recalibrated(ds.X[split.calibration], ds.Y[split.calibration])
    assert fresh.crs == back.crs and fresh.survey is back.survey


def test_a_bad_crs_or_survey_is_refused_naming_the_file(trained_synthetic, tmp_path):
    from dataclasses import replace

    from models.bundle import npz_bytes, sha256_bytes
    from models.geo import TargetCRS
    from models.survey import Survey

    result, ds = trained_synthetic
    survey = Survey.of(ds.Y[:50], None, ds.X[:10], ds.Y[:10], None)
    save_bundle(replace(result.model, crs=TargetCRS("EPSG:3857"), survey=survey), tmp_path / "b")
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    m["crs"]["crs"] = "EPSG:4326"
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="its crs cannot be used: .*not projected"):
        load_bundle(tmp_path / "b")
    m["crs"]["crs"] = "EPSG:3857"
    data = npz_bytes({"positions": np.zeros((3, 3)), "counts": np.ones(3), "example_features": ds.X[:2],
                      "example_points": ds.Y[:2]})  # positions of 3 coordinates in a 2-D bundle
    (tmp_path / "b" / "survey.npz").write_bytes(data)
    m["files"]["survey.npz"] = sha256_bytes(data)
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=r"survey\.npz: its arrays do not fit the bundle") as info:
        load_bundle(tmp_path / "b")
    assert info.value.path.endswith("survey.npz")


def test_typicality_round_trips_survives_recalibration_and_an_old_bundle_has_none(trained_synthetic, bundle_dir,
                                                                                  tmp_path):
    from models.bundle import npz_bytes, sha256_bytes

    result, ds = trained_synthetic
    split = result.split
    back = load_bundle(bundle_dir)
    X = ds.X[split.test]
    np.testing.assert_array_equal(back.typicality_scores(X), result.model.typicality_scores(X))
    assert read_manifest(bundle_dir)["typicality"]["n_calibration"] == len(split.calibration)
    fresh = back.recalibrated(ds.X[split.test][:40], ds.Y[split.test][:40])
    assert fresh.typicality.reference_ is back.typicality.reference_  # the reference and the bins stay
    np.testing.assert_allclose(fresh.typicality.calibration_, np.sort(back.typicality_scores(X[:40])), rtol=1e-12)
    assert len(back.typicality.calibration_) == len(split.calibration)  # the parent untouched
    assert load_bundle(FIXTURE / "bundle_v2").typicality is None
    shutil.copytree(bundle_dir, tmp_path / "b")
    arrays = dict(np.load(tmp_path / "b" / "typicality.npz"))
    arrays["mean"] = arrays["mean"][:-1]  # a projection of another feature count
    data = npz_bytes(arrays)
    (tmp_path / "b" / "typicality.npz").write_bytes(data)
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    m["files"]["typicality.npz"] = sha256_bytes(data)
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=r"typicality\.npz: its projection takes 15 features") as info:
        load_bundle(tmp_path / "b")
    assert info.value.path.endswith("typicality.npz")
