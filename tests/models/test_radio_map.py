"""The radio map (models/radio_map.py): the survey's rows kept in the bundle, the masked centre and the calibration
re-scored under a live transmitter set; and the drift it answers on the project's site simulator."""

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from models.bundle import load_bundle
from models.calibration.conformal import conformal_quantile
from models.exceptions import InputError
from models.radio import RadioView, RadioWatch
from models.radio_map import leave_unit_out, masked_centre
from tests.radio_site import LATER, REPLACED, train_site, walk


@pytest.fixture(scope="module")
def drift_site(tmp_path_factory):
    """The site's bundle (tests/radio_site.py), saved and loaded back: ``(loaded, dataset, trained)``."""
    result, ds = train_site()
    path = tmp_path_factory.mktemp("radio") / "site"
    result.save(path)
    return load_bundle(path), ds, result.model


def covered(model, X, Y, device=None):
    return float(np.mean(model.assess(X, Y, device=device).inside))


def test_the_bundle_keeps_the_radio_map(drift_site):
    loaded, ds, trained = drift_site
    a, b = loaded.radio_map, trained.radio_map
    assert a is not None and a.features.dtype == np.float32
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.units, b.units)
    assert a.reference.sum() > 0 and a.calibration.sum() > 0 and not (a.reference & a.calibration).any()
    # the survey never heard 12-15: the baseline says so
    assert set(np.flatnonzero(~loaded.radio_baseline.surveyed)) == set(LATER)


def test_an_empty_view_answers_as_trained(drift_site):
    model = drift_site[0]
    X, Y = walk(20, seed=1)
    same = model.adapted(RadioView())
    assert same.view is None and same.methods is model.methods
    np.testing.assert_array_equal(same.assess(X, Y).p_value, model.assess(X, Y).p_value)


def test_the_answer_keeps_the_rows_as_read_before_the_view(drift_site):
    model = drift_site[0]
    X, Y = walk(8, seed=2, replaced=REPLACED)
    sent = [[None if j in REPLACED[:1] else float(v) for j, v in enumerate(row)] for row in X]
    code = model.readings.unheard_
    want = np.array(sent, dtype=np.float64)
    want[:, REPLACED[0]] = code[REPLACED[0]]  # a null is read as the not-heard code
    view = RadioView(gone=REPLACED, offsets={"*": 2.0})
    adapted = model.adapted(view)
    for answer in (adapted.predict_region(sent), adapted.assess(sent, Y), model.predict_region(sent)):
        np.testing.assert_array_equal(answer.readings, want)  # as read: the view's masking and offset not in it
    rows = X.copy()
    got = adapted.predict_region(rows).readings
    np.testing.assert_array_equal(rows, X)  # the caller's array unchanged ...
    assert got is not rows  # ... and not the one kept


def test_a_view_naming_a_feature_the_model_lacks_is_refused(drift_site):
    with pytest.raises(InputError, match="feature 99"):
        drift_site[0].adapted(RadioView(gone=(99,)))


def test_leave_unit_out_is_the_knn_of_the_other_units():
    rng = np.random.default_rng(0)
    R, Yr, ur = rng.normal(size=(300, 6)), rng.normal(size=(300, 2)), rng.integers(0, 30, 300)
    Q, uq = rng.normal(size=(40, 6)), rng.integers(0, 30, 40)

    class Centre:
        n_neighbors, weights = 3, "uniform"

    got = leave_unit_out(R, Yr, ur, Q, uq, Centre())
    for i in range(len(Q)):
        others = ur != uq[i]
        idx = NearestNeighbors(n_neighbors=3).fit(R[others]).kneighbors(Q[i:i + 1], return_distance=False)[0]
        np.testing.assert_allclose(got[i], Yr[others][idx].mean(axis=0), atol=1e-12)


def test_the_rescored_threshold_is_the_conformal_quantile_under_the_live_set(drift_site):
    """A split bundle's calibration rows never fed its centre: under the live set each is scored against the
    masked centre's own answer, and the threshold is the finite-sample quantile of those scores, exactly."""
    model = drift_site[0]
    view = RadioView(gone=REPLACED)
    adapted = model.adapted(view)
    rm, base = model.radio_map, model.radio_baseline
    X = view.apply(rm.features.astype(np.float64), base)
    Xs = model._scaled(X)
    ref, cal = rm.reference, rm.calibration
    centre, _ = masked_centre(model, Xs[ref], rm.positions[ref])
    mu = centre.predict(Xs[cal])
    for name, reg in adapted.methods.items():
        scores = reg.shape_.conformity_scores(Xs[cal], rm.positions[cal] - mu)
        if reg.calibration == "rows":
            expected = conformal_quantile(scores, model.coverage)
        else:  # a group rule: the calibrator's own reduction of the same scores
            expected = type(reg.calibrator_)(reg.calibration, reg.random_state).fit(
                scores, rm.units[cal]).quantile(model.coverage)
        assert reg.alpha_q_ == pytest.approx(expected, rel=1e-5), name
        assert reg.shape_ is model.methods[name].shape_  # the shapes are the survey's: only the threshold moves


def test_replaced_beacons_and_a_device_offset_are_found_and_the_coverage_returns(drift_site):
    """The drift the issue names, on the simulator: four beacons replaced, then a device reading 6 dB high.
    The watch decides each within 250 queries; under its view the served coverage is back at the level."""
    model = drift_site[0]
    watch = RadioWatch(model.radio_baseline)
    X, Y = walk(80, seed=2, replaced=REPLACED)
    static = covered(model, X, Y)
    decided = None
    for i in range(0, len(X), 10):
        watch.observe(X[i:i + 10])
        if decided is None and set(REPLACED) <= set(watch.view().gone):
            decided = i + 10
    assert decided is not None and decided <= 250
    view = watch.view()
    assert set(view.gone) == set(REPLACED) and set(view.new) == set(LATER)
    adapted = model.adapted(view)
    X2, Y2 = walk(120, seed=3, replaced=REPLACED)
    served = covered(adapted, X2, Y2)
    # 600 rows at 120 positions: the level less three binomial sd of positions (0.08), and above the static model
    assert served >= model.coverage - 0.08 and served > static + 0.1

    # a device 6 dB high: found on its own queries, corrected for it alone
    X3, Y3 = walk(60, seed=4, replaced=REPLACED, offset_db=6.0)
    for i in range(0, len(X3), 10):
        watch.observe(X3[i:i + 10], device="phone-b")
    view = watch.view()
    # the same walk read as surveyed, measured alone: its new positions (some beyond the survey's grid, where
    # the matched profiles read louder) measure a small offset of their own, under the deadband, never applied
    same = RadioWatch(model.radio_baseline, deadband_db=0.0)
    X0, _ = walk(60, seed=4, replaced=REPLACED)
    for i in range(0, len(X0), 10):
        same.observe(X0[i:i + 10])
    base = same.view().offset(None)
    assert abs(base) < same.deadband_db == 0.0 or abs(base) < RadioWatch(model.radio_baseline).deadband_db
    assert view.offset("phone-b") == pytest.approx(6.0 + base, abs=0.5) and view.offset("phone-a") == view.offset(None)
    assert abs(view.offset(None)) < 6.0
    X4, Y4 = walk(120, seed=6, replaced=REPLACED, offset_db=6.0)
    assert covered(model.adapted(view), X4, Y4, device="phone-b") >= model.coverage - 0.08


def test_an_exchangeable_stream_leaves_the_model_as_trained(drift_site):
    model = drift_site[0]
    watch = RadioWatch(model.radio_baseline)
    X, _ = walk(400, seed=7)
    for i in range(0, len(X), 10):
        watch.observe(X[i:i + 10])
    assert watch.view().empty
    assert model.adapted(watch.view()).methods is model.methods


def test_the_guarantee_is_stated_in_the_same_words_everywhere(drift_site, tmp_path):
    """GET /model's ``radio.guarantee`` is GUARANTEE; the README, the concept page and the training report say
    the same sentence (line breaks and quote marks aside)."""
    import re
    from pathlib import Path

    from models.radio_map import GUARANTEE
    from training.commands.train_report import write_report

    root = Path(__file__).resolve().parents[2]

    def flat(text):
        return re.sub(r"\s+", " ", re.sub(r"^\s*(> |- )", " ", text, flags=re.M))

    for page in ("README.md", "docs/concepts/radio-drift.md"):
        assert GUARANTEE in flat((root / page).read_text()), page
    manifest = {**drift_site[0].manifest, "bundle_id": "b"}
    write_report(tmp_path, {"name": "site", "rows": 1, "d": 16, "n": 2, "sha256": "0" * 64}, {}, 0.9, manifest, {})
    assert GUARANTEE in flat((tmp_path / "report.md").read_text())


def test_the_maps_fingerprint_configuration_replaces_a_centre_that_is_no_search(drift_site, tmp_path):
    """A bundle whose centre is no k-NN search (here the paper's SVR) is searched, under a live set, in the
    configuration its map records (training's fingerprint search), kept through the bundle on disk."""
    import copy
    import dataclasses

    from models.bundle import save_bundle

    model = copy.copy(drift_site[0])
    knn = {"representation": "dbm", "cutoff_db": 0.0, "n_neighbors": 7, "weights": "uniform"}
    rm = model.radio_map = dataclasses.replace(model.radio_map, knn=knn)
    save_bundle(model, tmp_path / "b")
    again = load_bundle(tmp_path / "b")
    assert again.radio_map.knn == knn
    info, arrays = rm.to_arrays()
    with pytest.raises(Exception, match="radio.knn"):
        type(rm).from_arrays(arrays, model.n_features, model.n_targets, knn={"n_neighbors": 3})
    Xs = again._scaled(rm.features[rm.reference].astype(float))
    centre, _ = masked_centre(again, Xs, rm.positions[rm.reference])
    assert (centre.representation, centre.n_neighbors, centre.weights) == ("dbm", 7, "uniform")
    again.radio_map = dataclasses.replace(rm, knn=None)
    assert masked_centre(again, Xs, rm.positions[rm.reference])[0].n_neighbors == 3  # the textbook's
