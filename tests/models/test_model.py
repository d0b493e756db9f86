"""RegionModel: the one checked boundary (errors carry field/expected/received) and the fallback rule."""

from copy import deepcopy

import numpy as np
import pytest

from models.exceptions import InputError, UnattainableCoverageError, UnknownMethodError


@pytest.fixture(scope="module")
def model(trained_synthetic):
    return trained_synthetic[0].model


def context(exc):
    return exc.field, exc.expected, exc.received


def test_errors_name_field_expected_received(model):
    row = [-60.0] * 16
    with pytest.raises(InputError, match=r"features\[1\] has 7 values, but the bundle expects 16") as info:
        model.predict_region([row, row[:7]])
    assert context(info.value) == ("features[1]", "16 values", "7 values")
    with pytest.raises(InputError) as info:
        model.predict_region([row[:15] + [float("inf")]])
    assert context(info.value) == ("features[0][15]", "a finite number", "inf")
    with pytest.raises(InputError) as info:
        model.predict_region([])
    assert context(info.value) == ("features", "at least 1 row", "0 rows")
    with pytest.raises(InputError) as info:
        model.assess([row, row], [[1.0, 2.0]])
    assert context(info.value) == ("points", "2 rows", "1 row")
    with pytest.raises(InputError) as info:
        model.assess([row], [[1.0, 2.0, 3.0]])
    assert context(info.value) == ("points[0]", "2 values", "3 values")
    with pytest.raises(InputError) as info:
        model.predict_region([row], coverage=1.5)
    assert context(info.value) == ("coverage", "a number in (0, 1)", "1.5")


def test_highest_attainable_level_is_exposed_and_enforced(model):
    m = model.methods["lmve"].calibrator_.n_calibration_
    top = model.max_coverage()
    assert top == m / (m + 1)
    model.predict_region([[-60.0] * 16], coverage=top)  # attainable: a bounded region
    with pytest.raises(UnattainableCoverageError, match="highest attainable level") as info:
        model.predict_region([[-60.0] * 16], coverage=(top + 1) / 2)
    assert info.value.max_coverage == top and info.value.field == "coverage"


def test_unknown_method_names_the_choices(model):
    with pytest.raises(UnknownMethodError) as info:
        model.predict_region([[-60.0] * 16], method="magic")
    assert info.value.received == "magic" and "lmve" in info.value.expected
    # copula is a method of the model, but not of the ellipse API
    assert model.predict_region([[-60.0] * 16], method="copula").regions.kind == "box"
    with pytest.raises(UnknownMethodError):
        model.predict_region([[-60.0] * 16], method="copula", kind="ellipsoid")


@pytest.mark.parametrize("order", [["lmve", "nle", "ge"], ["nle", "lmve", "ge"]])
def test_fallback_walks_the_bundle_order_for_both_answers(model, trained_synthetic, order):
    ds = trained_synthetic[1]
    broken = deepcopy(model)
    broken.selection = {"order": order}
    for name in ("lmve", "nle"):
        shape = broken.methods[name].shape_
        if name == "lmve":
            W, b = shape.layers_[-1]
            shape.layers_[-1] = (W, np.full_like(b, np.inf))
        else:
            shape.R_ref_ = np.full_like(shape.R_ref_, np.nan)
    X, Y = ds.X[:5], ds.Y[:5]
    region, assessment = broken.predict_region(X), broken.assess(X, Y)
    for answer in (region, assessment):
        assert answer.method == "ge" and answer.fallback
        label = {"lmve": "LMVE", "nle": "NLE"}[order[1]]
        assert answer.fallback_reason == f"{label} produced non-finite shapes for this batch"
    direct = model.assess(X, Y, method="ge")
    np.testing.assert_array_equal(assessment.p_value, direct.p_value)
    np.testing.assert_array_equal(region.regions.shapes, model.predict_region(X, method="ge").regions.shapes)
    healthy = model.assess(X, Y)
    assert healthy.method == "lmve" and not healthy.fallback


def test_answers_carry_each_rows_typicality_unless_asked_not_to(model, trained_synthetic):
    """predict_region and assess give the rows' typicality p-values and scores (the step's own, to the bit);
    ``typicality=False`` leaves both out."""
    X, Y = trained_synthetic[1].X[:30], trained_synthetic[1].Y[:30]
    scores, p = model.typicality.assess(model.standardise(X))
    for answer in (model.predict_region(X), model.assess(X, Y)):
        np.testing.assert_array_equal(answer.typicality, p)
        np.testing.assert_array_equal(answer.typicality_scores, scores)
    for answer in (model.predict_region(X, typicality=False), model.assess(X, Y, typicality=False)):
        assert answer.typicality is None and answer.typicality_scores is None


def test_prepare_changes_no_answer_and_one_row_answers_as_in_a_batch(model, trained_synthetic):
    """``prepare`` (what the service calls when it loads a bundle) leaves every answer as it was; a row alone
    gets the region it gets in a batch, to float64's precision (this centre's BLAS products sum one row in
    another order than a batch), and its typicality score to float32's (a few rows are scored by the compiled
    loop in float64 differences, a batch by a float32 product: near a reference row the product's squared
    distance cancels, off by about eps32 (|z|^2 + |r|^2), its square root by the root of that)."""
    X = trained_synthetic[1].X[:40]
    typ = model.typicality
    Z = typ.project(model.standardise(X))
    scale = (Z ** 2).sum(axis=1) + (typ.reference_.astype(float) ** 2).sum(axis=1).max()
    exact = np.sort(np.sqrt(((Z[:, None, :] - typ.reference_[None].astype(float)) ** 2).sum(axis=2)), axis=1)
    before = model.predict_region(X)
    model.prepare()
    after = model.predict_region(X)
    np.testing.assert_array_equal(after.regions.shapes, before.regions.shapes)
    np.testing.assert_array_equal(after.regions.centers, before.regions.centers)
    for i in (0, 17, 39):
        alone = model.predict_region(X[i:i + 1])
        np.testing.assert_allclose(alone.regions.centers[0], before.regions.centers[i], rtol=1e-12)
        np.testing.assert_allclose(alone.regions.shapes[0], before.regions.shapes[i], rtol=1e-12)
        assert abs(alone.typicality_scores[0] - exact[i, :typ.k].mean()) <= 1e-9 * scale[i]
        assert abs(alone.typicality_scores[0] - before.typicality_scores[i]) <= np.sqrt(
            16 * np.finfo(np.float32).eps * scale[i])
