"""The ball: an isotropic constant shape whose calibrated region is the disc of the conformal distance quantile."""

import math

import numpy as np
import pytest
from scipy.stats import chi2

from models import GaussianEllipsoid, IsotropicBall, SplitConformalRegressor, registry
from models.centres import ConstantCentre


def _regressor(shape, X, Y, cal):
    reg = SplitConformalRegressor(shape, centre=ConstantCentre(), coverage=0.9, calibration="rows")
    return reg.fit(X[:cal], Y[:cal]).conformalize(X[cal:], Y[cal:])


def test_shape_is_the_identity_whatever_the_residuals_so_every_fold_scores_on_one_scale():
    rng = np.random.default_rng(1)
    for scale in (0.01, 1.0, 300.0):
        R = rng.normal(size=(500, 3)) * [1.0, 3.0, 0.5] * scale
        np.testing.assert_array_equal(IsotropicBall().fit(np.zeros((500, 1)), R).covariance_, np.eye(3))
    ball = IsotropicBall().fit(np.zeros((500, 1)), R)
    np.testing.assert_allclose(ball.conformity_scores(np.zeros((4, 1)), R[:4]), np.sum(R[:4] ** 2, axis=1), rtol=1e-12)


def test_calibrated_radius_is_the_finite_sample_quantile_of_the_distances():
    """Rule ``rows`` at 0.9: the radius is the ceil((m + 1) 0.9)-th smallest calibration distance, exactly."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(700, 2))
    Y = rng.normal(size=(700, 2)) * [4.0, 1.0] + [10.0, -3.0]
    reg = _regressor(IsotropicBall(), X, Y, 400)
    centre = Y[:400].mean(axis=0)
    distances = np.sort(np.linalg.norm(Y[400:] - centre, axis=1))
    k = math.ceil((300 + 1) * 0.9)
    region = reg.predict_region(X[:5])
    radius2 = region.shapes[0][0, 0]
    assert region.shapes[0][0, 1] == 0.0 and region.shapes[0][1, 1] == pytest.approx(radius2, rel=1e-12)
    assert math.sqrt(radius2) == pytest.approx(distances[k - 1], rel=1e-9)
    assert region.volume()[0] == pytest.approx(math.pi * distances[k - 1] ** 2, rel=1e-9)


def test_isotropic_gaussian_covers_eta_at_the_chi_square_radius():
    rng = np.random.default_rng(3)
    Y = rng.normal(size=(30000, 2)) * 2.0
    X = rng.normal(size=(30000, 1))
    reg = SplitConformalRegressor(IsotropicBall(), centre=ConstantCentre(), coverage=0.9)
    reg.fit(X[:15000], Y[:15000]).conformalize(X[15000:25000], Y[15000:25000])
    region = reg.predict_region(X[25000:])
    assert region.contains(Y[25000:]).mean() == pytest.approx(0.9, abs=0.015)
    assert region.shapes[0][0, 0] == pytest.approx(4.0 * chi2.ppf(0.9, 2), rel=0.05)


def test_smaller_than_ge_when_a_few_large_errors_stretch_ge_along_a_line():
    """Typical errors isotropic (sd 1), 3 % of them 60 units along x: GE's moment stretches along x and its
    calibrated ellipse must reach the typical errors across y; the ball covers the same at a smaller area."""
    rng = np.random.default_rng(4)
    Y = rng.normal(size=(6000, 2))
    wrong = rng.random(6000) < 0.03
    Y[wrong, 0] += rng.choice([-60.0, 60.0], size=wrong.sum())
    X = np.zeros((6000, 1))
    regions = {name: _regressor(shape, X[:4000], Y[:4000], 2000).predict_region(X[4000:])
               for name, shape in (("ge", GaussianEllipsoid()), ("ball", IsotropicBall()))}
    for region in regions.values():
        assert region.contains(Y[4000:]).mean() == pytest.approx(0.9, abs=0.03)
    assert regions["ball"].volume()[0] < 0.5 * regions["ge"].volume()[0]


def test_round_trip_and_registry():
    R = np.random.default_rng(5).normal(size=(50, 2))
    ball = IsotropicBall().fit(np.zeros((50, 4)), R)
    params, arrays = ball.to_arrays()
    again = IsotropicBall.from_arrays(params, arrays)
    np.testing.assert_array_equal(again.covariance_, ball.covariance_)
    np.testing.assert_array_equal(again.predict_shape(np.zeros((3, 4))), ball.predict_shape(np.zeros((3, 4))))
    spec = registry.method("ball")
    assert spec.estimator is IsotropicBall and spec.kind == "ellipsoid"
    assert registry.fallback_order() == ("lmve", "nle", "ge", "ball")
