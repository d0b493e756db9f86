import numpy as np
import pytest
from sklearn.svm import SVR

from models.centre import ConstantCentre, SVRCentre
from models.exceptions import InputError, NotFittedError


@pytest.mark.parametrize("gamma", ["scale", 0.3])
def test_numpy_evaluation_matches_sklearn_svr(gamma):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    Y = np.c_[X[:, 0] + 0.1 * rng.normal(size=300), np.sin(X[:, 1]), X[:, 2] ** 2]
    centre = SVRCentre(gamma=gamma).fit(X, Y)
    Xt = rng.normal(size=(50, 5))
    ref = np.column_stack([SVR(gamma=gamma).fit(X, Y[:, j]).predict(Xt) for j in range(3)])
    np.testing.assert_allclose(centre.predict(Xt), ref, rtol=1e-9, atol=1e-12)
    again = SVRCentre.from_arrays(centre.to_arrays(), centre.get_params())
    np.testing.assert_allclose(again.predict(Xt), ref, rtol=1e-9, atol=1e-12)


def test_scaled_targets_map_back():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    Y = np.c_[1000 + 50 * X[:, 0], 0.01 * X[:, 1]]
    pred = SVRCentre(scale_targets=True).fit(X, Y).predict(X)
    assert np.corrcoef(pred[:, 0], Y[:, 0])[0, 1] > 0.95 and abs(pred[:, 0].mean() - 1000) < 5


def test_centre_errors():
    with pytest.raises(NotFittedError):
        SVRCentre().predict(np.zeros((1, 2)))
    c = ConstantCentre().fit(np.zeros((4, 2)), np.ones((4, 2)))
    with pytest.raises(InputError, match="X has 3 columns, but ConstantCentre expects 2"):
        c.predict(np.zeros((1, 3)))
