"""What every registered shape method promises (models/shapes/base.py): conformal validity over random splits, the
adaptive shapes smaller than GE on heteroscedastic data, a clear error before fit and on bad inputs."""

import copy

import numpy as np
import pytest

from models import GaussianEllipsoid, LMVEShape, NearestNeighbourEllipsoid, SplitConformalRegressor, SVRCentre, registry
from models.centres import ConstantCentre
from models.exceptions import InputError, NotFittedError
from tests.conftest import heteroscedastic
from tests.models.shapes import FAST_LMVE, coverage_over_random_splits


@pytest.fixture(scope="module")
def hetero_fit():
    X, Y = heteroscedastic(3000, seed=7)
    tr, pool = np.arange(1800), np.arange(1800, 3000)
    centre = SVRCentre().fit(X[tr], Y[tr])
    centers = centre.predict(X)
    fitted = {}
    for name, spec in registry.METHODS.items():  # every registered method
        shape = spec.make(seed=0, **(FAST_LMVE if name == "lmve" else {}))
        reg = SplitConformalRegressor(shape, centre=centre, prefit_centre=True, coverage=0.9)
        fitted[name] = reg.fit(X[tr], Y[tr], centers=centers[tr])
    return fitted, X, Y, centers, pool


@pytest.mark.slow
@pytest.mark.parametrize("method", list(registry.METHODS))
def test_conformal_validity_over_random_splits(hetero_fit, method):
    """Mean coverage over 200 random calibration/test splits lies in [eta - tol, eta + 1/(m_c+1) + tol]."""
    fitted, X, Y, centers, pool = hetero_fit
    mean = coverage_over_random_splits(fitted[method], X, Y, pool, seed=11, centers=centers)
    assert 0.9 - 0.01 <= mean <= 0.9 + 1 / 401 + 0.01, mean


@pytest.mark.parametrize("name", list(registry.METHODS))
def test_predict_before_fit_is_refused(name):
    with pytest.raises(NotFittedError, match="not fitted"):
        registry.method(name).make().conformity_scores(np.zeros((2, 3)), np.zeros((2, 2)))


def test_bad_inputs_name_what_was_expected():
    X, R = heteroscedastic(100)
    with pytest.raises(InputError, match="X has 40 rows but R has 100"):
        GaussianEllipsoid().fit(X[:40], R)
    with pytest.raises(InputError, match=r"contains NaN or inf \(first at row 3, column 1\)"):
        Xn = X.copy(); Xn[3, 1] = np.nan  # noqa: E702
        GaussianEllipsoid().fit(Xn, R)
    with pytest.raises(InputError, match="R contains NaN or inf"):
        Rn = R.copy(); Rn[0, 0] = np.inf  # noqa: E702
        GaussianEllipsoid().fit(X, Rn)
    reg = SplitConformalRegressor(GaussianEllipsoid(), centre=ConstantCentre()).fit(X[:60], R[:60])
    reg.conformalize(X[60:], R[60:])
    with pytest.raises(InputError, match="X has 2 columns, but the fitted shape expects 3"):
        reg.predict_region(X[:, :2])
    with pytest.raises(InputError, match="2-D"):
        reg.predict_region(X[0, :])
    with pytest.raises(InputError, match="at least 20 rows"):
        NearestNeighbourEllipsoid().fit(X[:19], R[:19])
    with pytest.raises(InputError, match="at least 50 rows"):
        NearestNeighbourEllipsoid(n_neighbors=50).fit(X[:30], R[:30])
    with pytest.raises(InputError, match="LMVEShape needs at least 20 rows"):
        LMVEShape().fit(X[:25], R[:25])
    with pytest.raises(InputError, match="coverage must lie in the open interval"):
        SplitConformalRegressor(GaussianEllipsoid(), coverage=1.2).fit(X, R)
    reg = SplitConformalRegressor(GaussianEllipsoid(), centre=ConstantCentre()).fit(X[:60], R[:60])
    with pytest.raises(NotFittedError, match="conformalize"):
        reg.predict_region(X[60:])
    reg.conformalize(X[60:], R[60:])
    with pytest.raises(InputError, match="coverage must lie in the open interval"):
        reg.predict_region(X[:3], coverage=0.0)


def test_lmve_and_nle_beat_ge_on_heteroscedastic_data(hetero_fit):
    fitted, X, Y, centers, pool = hetero_fit
    ca, te = pool[:400], pool[400:]
    vol, cov = {}, {}
    for name, reg in fitted.items():
        reg.conformalize(X[ca], Y[ca], centers=centers[ca])
        region = reg.predict_region(X[te], centers=centers[te])
        vol[name], cov[name] = region.volume().mean(), region.contains(Y[te]).mean()
    for name in ("nle", "lmve"):
        assert vol[name] < 0.75 * vol["ge"], vol
        assert abs(cov[name] - cov["ge"]) < 0.05, cov
