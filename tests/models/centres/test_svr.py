"""The paper's SVR centre: numpy evaluation against scikit-learn, target scaling, checked input."""

import numpy as np
import pytest
from sklearn.svm import SVR

from models.centres import ConstantCentre, SVRCentre
from models.exceptions import InputError


@pytest.mark.parametrize("gamma", ["scale", 0.3])
def test_numpy_evaluation_matches_sklearn_svr(gamma):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    Y = np.c_[X[:, 0] + 0.1 * rng.normal(size=300), np.sin(X[:, 1]), X[:, 2] ** 2]
    centre = SVRCentre(gamma=gamma).fit(X, Y)
    Xt = rng.normal(size=(50, 5))
    ref = np.column_stack([SVR(gamma=gamma).fit(X, Y[:, j]).predict(Xt) for j in range(3)])
    np.testing.assert_allclose(centre.predict(Xt), ref, rtol=1e-9, atol=1e-12)
    again = SVRCentre.from_arrays(*centre.to_arrays())
    np.testing.assert_allclose(again.predict(Xt), ref, rtol=1e-9, atol=1e-12)


def test_scaled_targets_map_back():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    Y = np.c_[1000 + 50 * X[:, 0], 0.01 * X[:, 1]]
    pred = SVRCentre(scale_targets=True).fit(X, Y).predict(X)
    assert np.corrcoef(pred[:, 0], Y[:, 0])[0, 1] > 0.95 and abs(pred[:, 0].mean() - 1000) < 5


def test_centre_fit_errors_name_the_field():
    with pytest.raises(InputError, match="X has 4 rows but Y has 3; they must match") as info:
        SVRCentre().fit(np.zeros((4, 2)), np.ones((3, 2)))
    assert (info.value.field, info.value.expected, info.value.received) == ("Y", "4 rows", "3 rows")
    Y = np.ones((4, 2))
    Y[2, 1] = np.nan
    with pytest.raises(InputError, match=r"Y contains NaN or inf \(first at row 2, column 1\)") as info:
        ConstantCentre().fit(np.zeros((4, 2)), Y)
    assert info.value.field == "Y[2][1]"


def test_per_target_gammas_and_target_scale_match_sklearn():
    """A bundle whose targets' SVRs have different ``gamma`` takes one kernel per target; with
    ``scale_targets`` the target scale and mean are folded into the kernel plan."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(250, 4))
    Y = np.c_[100 + 20 * np.sin(X[:, 0]), 0.5 * X[:, 1] * X[:, 2]]
    centre = SVRCentre(scale_targets=True).fit(X, Y)
    params, arrays = centre.to_arrays()
    arrays["gamma"] = np.array([0.2, 0.7])
    mixed = SVRCentre.from_arrays(params, arrays)
    Xt = rng.normal(size=(40, 4))
    Z = (Y - centre.y_mean_) / centre.y_scale_
    ref = np.column_stack([SVR(gamma=g).fit(X, Z[:, j]).predict(Xt) for j, g in enumerate(centre.gamma_)])
    ref = ref * centre.y_scale_ + centre.y_mean_
    np.testing.assert_allclose(centre.predict(Xt), ref, rtol=1e-9, atol=1e-9)
    # the per-target path: the kernel sum written out with each target's own gamma
    for j, g in enumerate(arrays["gamma"]):
        sv, a = mixed.support_vectors_[j], mixed.dual_coef_[j]
        K = np.exp(-g * ((Xt[:, None, :] - sv[None]) ** 2).sum(-1))
        expected = (K @ a + mixed.intercept_[j]) * mixed.y_scale_[j] + mixed.y_mean_[j]
        np.testing.assert_allclose(mixed.predict(Xt)[:, j], expected, rtol=1e-9, atol=1e-9)
