import json

import pytest

from models.bundle import load_bundle
from training.commands.train import main


@pytest.mark.slow
def test_synthetic_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--dataset", "synthetic", "--n-samples", "1000", "--out", str(out), "--quiet",
                 "--calibration", "split"]) == 0  # 200 positions: auto would cross-fit (tests/training/test_cross_fit.py)
    printed = capsys.readouterr().out
    assert "LMVE" in printed and "GE" in printed and "coverage" in printed
    for f in ("bundle/manifest.json", "report.md", "metrics.json", "test_regions.png"):
        assert (out / f).is_file(), f
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert set(metrics) == {"ge", "nle", "lmve", "ball", "copula"}
    model = load_bundle(out / "bundle")
    sel = model.selection  # auto: the smallest held-out volume, on the 3-fold cross-fit and the test part
    assert sel["folds"] == 3 and model.primary_method == min(sel["order"], key=lambda m: sel["held_out"][m]["volume"])
    # on those 910 held-out rows (the test part's 100 alone cannot tell them apart) LMVE's learnt shapes beat GE's
    assert sel["held_out"]["lmve"]["volume"] < sel["held_out"]["ge"]["volume"]
    assert f"served: {model.primary_method.upper()}" in printed
    centre = model.manifest["training"]["centre"]  # the default: chosen by cross-validation
    assert centre["name"] == min(centre["cv"], key=lambda n: centre["cv"][n]["rmse"])
    types = {"knn": "KNNCentre", "fingerprint": "FingerprintCentre", "hgb": "HGBCentre", "gp": "GPCentre"}
    assert model.manifest["centre"]["type"] == types.get(centre["name"], "SVRCentre")
    assert (out / "test_regions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_csv_writes_nothing(tmp_path, capsys):
    csv = tmp_path / "bad.csv"
    csv.write_text("a,b,x,y\n" + "\n".join(f"{i},{i % 7},{i},{i * 2}" for i in range(100)))
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x,q", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "column(s) ['q'] not found" in err
    assert not out.exists()


@pytest.mark.slow
def test_csv_run_trains_a_bundle(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    rows = []
    for _ in range(300):
        a, b = rng.normal(size=2)
        rows.append(f"{a},{b},{a + 0.3 * abs(b) * rng.normal()},{b + 0.1 * rng.normal()}")
    csv = tmp_path / "site.csv"
    csv.write_text("a,b,x,y\n" + "\n".join(rows))
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--methods", "ge,nle",
                 ]) == 0
    model = load_bundle(out / "bundle")
    held = model.selection["held_out"]
    assert model.feature_names == ["a", "b"] and model.selection["rule"] == "auto"
    assert model.primary_method == min(("nle", "ge"), key=lambda m: held[m]["volume"])


def test_variant_options_reach_the_bundle(tmp_path):
    out = tmp_path / "run"
    assert main(["--n-samples", "600", "--out", str(out), "--quiet", "--methods", "ge,nle,lmve", "--lmve-loss", "nll",
                 "--centre", "paper", "--lmve-max-steps", "30", "--cross-fit", "3", "--lmve-batch-size", "64",
                 "--calibration", "split"]) == 0
    model = load_bundle(out / "bundle")
    assert model.manifest["training"]["cross_fit"] == 3
    assert sum(model.manifest["training"]["rows"].values()) == 600
    lmve = model.manifest["methods"]["lmve"]["params"]
    assert lmve["loss"] == "nll" and lmve["output"] == "cholesky" and lmve["batch_size"] == 64
    assert model.manifest["centre"]["params"]["scale_targets"] is False
    assert model.methods["lmve"].shape_.output_ == "cholesky"


@pytest.mark.slow
def test_bad_lmve_batch_size_is_named_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--n-samples", "300", "--out", str(out), "--quiet", "--methods", "ge,nle,lmve", "--groups", "none",
                 "--lmve-batch-size", "0"]) == 2
    assert "batch_size must be None (automatic) or a positive integer; got 0" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--methods", "ball", "--primary", "copula"], "--primary must be auto or an ellipsoid method being trained "
                                                   "(ge, nle, ball); got 'copula'"),
    (["--centre", "auto", "--centre-candidates", "knn,nope"], "--centre-candidates: unknown centre 'nope'"),
    (["--primary-folds", "1"], "--primary-folds must be 0")])
def test_a_bad_configuration_names_the_flag_before_any_data_is_read(tmp_path, capsys, flags, message):
    """The pipeline's configuration checks speak in fields (``primary``); the command says the flag that set it."""
    out = tmp_path / "run"
    assert main(["--n-samples", "300", "--out", str(out), "--quiet", *flags]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_the_readmes_first_command_on_a_survey_as_users_have_it_trains_on_the_readings(tmp_path, capsys,
                                                                                       monkeypatch):
    """``lmve-train --csv survey.csv --targets x,y --out runs/mine`` on a survey with ``point_id``, ``timestamp``
    and ``phone`` beside its readings: the features are the readings alone, the run says what it left out and
    why, and a walk of the readings and positions alone scores."""
    import numpy as np
    import pandas as pd

    from tests.training.data.test_columns import survey
    from training.commands.evaluate import main as evaluate

    frame, pos = survey(positions=30, repeats=6, seed=3)
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 40, size=(30, 2))
    frame = frame[["b1", "b2", "b3", "b4", "point_id", "timestamp", "phone"]].assign(x=xy[pos, 0], y=xy[pos, 1])
    frame.to_csv(tmp_path / "survey.csv", index=False)
    monkeypatch.chdir(tmp_path)
    assert main(["--csv", "survey.csv", "--targets", "x,y", "--out", "runs/mine"]) == 0  # the README's, as is
    out = capsys.readouterr().out
    assert "3 column(s) left out of the features" in out and "point_id (integer codes constant within each of " \
        "the 30 positions" in out and "--also-features COL takes one back" in out
    model = load_bundle(tmp_path / "runs/mine/bundle")
    assert model.feature_names == ["b1", "b2", "b3", "b4"]
    manifest = json.loads((tmp_path / "runs/mine/bundle/manifest.json").read_text())
    assert set(manifest["dataset"]["left_out"]) == {"point_id", "timestamp", "phone"}
    frame[["b1", "b2", "b3", "b4", "x", "y"]].iloc[::5].to_csv(tmp_path / "walk.csv", index=False)
    assert evaluate(["--bundle", "runs/mine/bundle", "--csv", "walk.csv"]) == 0
    # named back, a left-out column is a feature again
    assert main(["--csv", "survey.csv", "--targets", "x,y", "--out", "runs/with", "--methods", "ge,nle",
                 "--also-features", "phone"]) == 0
    assert load_bundle(tmp_path / "runs/with/bundle").feature_names == ["b1", "b2", "b3", "b4", "phone"]


def test_train_from_python_writes_the_bundle_lmve_train_writes_on_a_survey(tmp_path, capsys):
    """``train()`` groups a survey by position itself and states its guarantee, so a Python user's bundle equals
    ``lmve-train``'s: the same files (bundle id), calibration record and dataset record."""
    import numpy as np
    import pandas as pd

    from models.bundle import read_manifest
    from training.data.datasets import load_csv, load_dataset
    from training.pipeline import TrainConfig, train

    ds = load_dataset("synthetic", n_samples=300, seed=2)  # 60 positions, five readings each
    assert len(np.unique(ds.Y, axis=0)) == 60
    frame = pd.DataFrame(ds.X, columns=ds.feature_names).assign(x=ds.Y[:, 0], y=ds.Y[:, 1])
    frame.to_csv(csv := tmp_path / "survey.csv", index=False)
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(tmp_path / "cli"), "--quiet", "--seed", "3",
                 "--methods", "ge,nle", "--centre", "knn", "--no-rssi"]) == 0
    assert "grouped by position (60 positions)" in capsys.readouterr().out

    result = train(load_csv(csv, "x,y"), TrainConfig(seed=3, methods=("ge", "nle"), centre="knn"))
    python = result.save(tmp_path / "python")
    cli = read_manifest(tmp_path / "cli" / "bundle")
    assert result.dataset.grouping["by"] == "position" and python["calibration"]["rule"] != "rows"
    assert python["bundle_id"] == cli["bundle_id"] and python["files"] == cli["files"]
    assert python["calibration"] == cli["calibration"] and python["dataset"] == cli["dataset"]
    assert python["training"] == cli["training"] and python["selection"] == cli["selection"]
    assert "a reading at a position not in the survey" in python["calibration"]["guarantee"]
