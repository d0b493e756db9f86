"""``lmve-update``: a re-survey learned by the radio map brings the regions back after transmitters were replaced;
bad input writes nothing and exits 2 with one line."""

import numpy as np
import pandas as pd
import pytest

from models.bundle import load_bundle
from service.store import ModelStore
from tests.radio_site import LATER, REPLACED, saved_site, walk
from training.commands.update import main


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return saved_site(tmp_path_factory.mktemp("update"))


def write(path, model, X, Y, extra=None):
    frame = pd.DataFrame(X, columns=model.feature_names)
    frame[model.target_names[0]], frame[model.target_names[1]] = Y[:, 0], Y[:, 1]
    for name, values in (extra or {}).items():
        frame[name] = values
    frame.to_csv(path, index=False)
    return path


def test_a_resurvey_is_learned_and_the_regions_come_back(site, tmp_path, capsys):
    """Beacons replaced: 30 re-walked positions (five readings each) join the map; on a later walk the new
    bundle covers at the level where the old one lost it, and places the new beacons' readings."""
    parent = load_bundle(site)
    before = {p.name: p.read_bytes() for p in site.iterdir()}
    X, Y = walk(30, seed=9, replaced=REPLACED)
    out = tmp_path / "new"
    assert main([str(site), str(write(tmp_path / "re.csv", parent, X, Y)), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "150 rows at 30 units learned" in said and "before: centre error mean" in said and "after : " in said
    new = load_bundle(out)
    assert {p.name: p.read_bytes() for p in site.iterdir()} == before  # the parent is left as it was
    rec = new.manifest["training"]["updated"]
    assert rec["parent_bundle_id"] == parent.manifest["bundle_id"] and (rec["rows"], rec["units"]) == (150, 30)
    assert rec["after"]["centre_mean"] < rec["before"]["centre_mean"]
    assert new.manifest["calibration"]["mode"] == "updated" and "approximate" in new.manifest["calibration"]["guarantee"]
    m = new.radio_map
    assert len(m.features) == len(parent.radio_map.features) + 150 and m.reference[-150:].all()
    assert set(np.flatnonzero(new.radio_baseline.surveyed)) >= set(LATER)  # the new beacons are on the map now
    X2, Y2 = walk(120, seed=11, replaced=REPLACED)
    old, fresh = parent.assess(X2, Y2).inside.mean(), new.assess(X2, Y2).inside.mean()
    # 600 rows at 120 positions: the level less three binomial sd of positions (0.08)
    assert old < 0.5 and fresh >= 0.9 - 0.08
    store = ModelStore(site)  # the service's store loads it as any bundle
    store.load_initial()
    loaded, previous = store.reload(out)
    assert loaded.version == new.manifest["bundle_id"] and previous.version == parent.manifest["bundle_id"]


def test_a_position_walked_again_joins_its_survey_unit(site, tmp_path):
    """A re-walk of surveyed positions: its rows are never centred on the survey's readings at the same place."""
    parent = load_bundle(site)
    rm = parent.radio_map
    rows = np.flatnonzero(rm.calibration)[:20]
    X, Y = rm.features[rows].astype(float), rm.positions[rows]
    new, held_out = parent.updated(X, Y, units=np.arange(20) // 5)
    assert np.array_equal(new.radio_map.units[-20:], rm.units[rows])
    assert not np.allclose(held_out, Y)  # its own position's readings were left out


def refused(capsys, argv, out) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("lmve-update: error: ")
    assert not out.exists()
    return err


def test_bad_input_is_refused_with_one_line_and_nothing_written(site, tmp_path, capsys):
    parent = load_bundle(site)
    X, Y = walk(5, seed=9, replaced=REPLACED)
    out = tmp_path / "new"
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "empty.csv" in refused(capsys, [str(site), str(empty), "--out", str(out)], out)
    header = tmp_path / "header.csv"
    header.write_text(",".join([*parent.feature_names, *parent.target_names]) + "\n")
    assert "no rows" in refused(capsys, [str(site), str(header), "--out", str(out)], out)
    no_target = write(tmp_path / "no_y.csv", parent, X, Y)
    pd.read_csv(no_target).drop(columns=["y_m"]).to_csv(no_target, index=False)
    assert "y_m" in refused(capsys, [str(site), str(no_target), "--out", str(out)], out)
    heard = np.where(np.arange(len(X)) % 2 == 0, -70.0, 100.0)
    other = write(tmp_path / "other.csv", parent, X, Y, extra={"beacon_17": heard, "beacon_18": 100.0})
    err = refused(capsys, [str(site), str(other), "--out", str(out)], out)
    assert "beacon_17" in err and "beacon_18" not in err and "retrain with lmve-train" in err
    unheard = write(tmp_path / "unheard.csv", parent, X, Y, extra={"beacon_18": 100.0, "note": "walk 2"})
    assert main([str(site), str(unheard), "--out", str(out)]) == 0  # never heard, or not a transmitter: ignored
    assert "--out must differ" in refused(capsys, [str(site), str(unheard), "--out", str(site)], tmp_path / "none")


def test_a_bundle_without_a_radio_map_is_refused(bundle_dir, tmp_path, capsys):
    """A bundle from before the radio map (its radio.npz and manifest entry removed)."""
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(bundle_dir, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["radio"], manifest["files"]["radio.npz"]
    (old / "radio.npz").unlink()
    (old / "manifest.json").write_text(json.dumps(manifest))
    model = load_bundle(old)
    X = np.full((3, model.n_features), -70.0)
    path = write(tmp_path / "re.csv", model, X, np.zeros((3, 2)))
    assert "keeps no radio map" in refused(capsys, [str(old), str(path), "--out", str(tmp_path / "new")],
                                           tmp_path / "new")
