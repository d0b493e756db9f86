"""``lmve-train --split-by``: one bundle per value of a label column, written as a model repository that
``lmve-serve --model-repository`` serves."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from models.bundle import load_bundle
from models.exceptions import InputError
from service.repository import ModelRepository
from training.commands.sites import model_name, parse_names, split_values
from training.commands.train import main
from training.data.datasets import load_dataset, subset


@pytest.mark.slow
def test_split_by_writes_one_bundle_per_value_and_a_manifest(survey_csv, tmp_path, capsys):
    out = tmp_path / "repo"
    code = main(["--csv", str(survey_csv), "--targets", "x,y", "--split-by", "building", "--split-names", "A=west",
                 "--methods", "ge,nle", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 1  # building C could not be trained: said, and the exit code says so
    manifest = json.loads((out / "repository.json").read_text())
    assert manifest["split_by"] == "building" and manifest["source"] == str(survey_csv)
    assert list(manifest["models"]) == ["west", "building=B"] and list(manifest["failed"]) == ["building=C"]
    assert manifest["failed"]["building=C"]["rows"] == 12 and "building=C" in printed and "FAILED" in printed
    for name, value in (("west", "A"), ("building=B", "B")):
        entry = manifest["models"][name]
        model = load_bundle(out / name)
        assert entry["value"] == value and entry["rows"] == 400
        assert entry["bundle_id"] == model.manifest["bundle_id"] and entry["primary_method"] == model.primary_method
        assert "building" not in model.feature_names  # the split column is a label, never a feature
        assert (out / "reports" / name / "report.md").is_file()
    # each model was trained on its own building: B's centres lie 100 m east of A's for the same readings
    X = pd.read_csv(survey_csv).query("building == 'A'").drop(columns=["x", "y", "building"]).to_numpy()[:20]
    a, b = load_bundle(out / "west"), load_bundle(out / "building=B")
    shift = b.predict_region(X, "ge").regions.centers[:, 0] - a.predict_region(X, "ge").regions.centers[:, 0]
    assert np.median(shift) == pytest.approx(100.0, abs=20.0)
    # what lmve-serve makes of it: the two models, and the failed one is not named (it has no bundle)
    served = ModelRepository(out)
    assert sorted(served.stores) == ["building=B", "west"]


def test_split_values_names_and_refusals(tmp_path):
    ds = load_dataset("synthetic", n_samples=300, seed=0)
    parts = split_values(ds, "device")
    assert [v for v, _ in parts] == sorted({str(int(v)) for v in ds.meta["device"]}, key=int)
    assert sum(int(m.sum()) for _, m in parts) == 300
    part = subset(ds, parts[0][1])
    assert part.X.shape[0] == int(parts[0][1].sum()) and set(part.meta["device"].tolist()) == {0}
    assert parse_names("0=west, 1=east") == {"0": "west", "1": "east"}
    assert model_name("BUILDINGID", "2", {}) == "BUILDINGID=2"
    with pytest.raises(InputError, match="VALUE=NAME"):
        parse_names("west")
    with pytest.raises(InputError, match="cannot name a model directory"):
        model_name("b", "1", {"1": "../escape"})
    with pytest.raises(InputError, match="has no such label column; it has device"):
        split_values(ds, "BUILDINGID")
    code = main(["--dataset", "synthetic", "--n-samples", "300", "--split-by", "device", "--split-names", "9=nine",
                 "--methods", "ge,nle", "--out", str(tmp_path / "r"), "--quiet"])
    assert code != 0 and not (tmp_path / "r" / "repository.json").exists()
