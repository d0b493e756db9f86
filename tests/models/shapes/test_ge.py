"""models/shapes/ge.py: GE's threshold is the chi-square quantile and its shape the conditional covariance on
Gaussian data (Lemma 1, Theorem 1), where LMVE cannot meaningfully beat it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2
from sklearn.linear_model import LinearRegression

from models import GaussianEllipsoid, LMVEShape, SplitConformalRegressor
from models.centres import ConstantCentre
from tests.conftest import joint_gaussian
from tests.models.shapes import FAST_LMVE


def test_lemma1_ge_threshold_is_the_chi_square_quantile():
    """Gaussian y: GE calibrated at eta scales Sigma by ~F^-1_chi2(n)(eta) and covers ~eta."""
    rng = np.random.default_rng(0)
    Sigma = np.array([[2.0, 0.6], [0.6, 0.5]])
    L = np.linalg.cholesky(Sigma)
    Y = rng.normal(size=(30000, 2)) @ L.T + np.array([3.0, -1.0])
    X = rng.normal(size=(30000, 1))  # independent of y
    reg = SplitConformalRegressor(GaussianEllipsoid(), centre=ConstantCentre(), coverage=0.9)
    reg.fit(X[:15000], Y[:15000]).conformalize(X[15000:25000], Y[15000:25000])
    assert reg.alpha_q_ == pytest.approx(chi2.ppf(0.9, 2), rel=0.05)  # sampling sd ~2 %
    np.testing.assert_allclose(reg.shape_.covariance_, Sigma, rtol=0.05, atol=0.02)
    region = reg.predict_region(X[25000:])
    assert region.contains(Y[25000:]).mean() == pytest.approx(0.9, abs=0.015)
    # optimal volume: V_2 * chi2^{n/2} * sqrt(det Sigma)
    expected = np.pi * chi2.ppf(0.9, 2) * np.sqrt(np.linalg.det(Sigma))
    assert region.volume()[0] == pytest.approx(expected, rel=0.06)


@pytest.fixture(scope="module")
def gaussian_fit():
    X, Y, Sigma = joint_gaussian(3000, seed=3)
    tr, ca, te = slice(0, 2000), slice(2000, 2500), slice(2500, 3000)
    centre = LinearRegression().fit(X[tr], Y[tr])
    out = {}
    for name, shape in (("ge", GaussianEllipsoid()), ("lmve", LMVEShape(random_state=0, **FAST_LMVE))):
        reg = SplitConformalRegressor(shape, centre=centre, prefit_centre=True, coverage=0.9)
        reg.fit(X[tr], Y[tr]).conformalize(X[ca], Y[ca])
        out[name] = reg.predict_region(X[te])
    return out, Y[te], Sigma


@pytest.mark.slow
def test_theorem1_ge_shape_is_the_conditional_covariance(gaussian_fit):
    regions, Y, Sigma = gaussian_fit
    ge = regions["ge"]
    # calibrated shape / alpha_q is the estimated shape; compare with Sigma
    np.testing.assert_allclose(ge.shapes[0] / ge.alpha_q, Sigma, rtol=0.1, atol=0.05)


def test_theorem1_lmve_cannot_meaningfully_beat_ge_on_gaussian_data(gaussian_fit):
    regions, Y, _ = gaussian_fit
    v_ge = regions["ge"].volume().mean()
    v_lmve = regions["lmve"].volume().mean()
    assert v_lmve >= 0.95 * v_ge, (v_lmve, v_ge)
    assert regions["lmve"].contains(Y).mean() >= 0.85
