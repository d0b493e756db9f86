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


def test_a_capped_fit_is_the_fit_on_its_seeded_subset():
    from models.centres.base import capped_rows

    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 4))
    Y = np.c_[X[:, 0], X[:, 1] - X[:, 2]]
    rows = capped_rows(300, 120, seed=5)
    assert len(rows) == 120 and len(set(rows.tolist())) == 120 and (np.diff(rows) > 0).all()
    capped = SVRCentre(max_rows=120, seed=5).fit(X, Y)
    alone = SVRCentre(max_rows=None).fit(X[rows], Y[rows])
    np.testing.assert_array_equal(capped.predict(X), alone.predict(X))
    assert not np.array_equal(SVRCentre(max_rows=120, seed=6).fit(X, Y).predict(X), capped.predict(X))
    assert capped_rows(300, 300, seed=0) is None and capped_rows(300, None, seed=0) is None
    np.testing.assert_array_equal(SVRCentre(max_rows=300).fit(X, Y).predict(X),
                                  SVRCentre(max_rows=None).fit(X, Y).predict(X))
    again = SVRCentre.from_arrays(*capped.to_arrays())
    assert again.max_rows == 120 and again.seed == 5
    for bad in (1, 2.5, "many", True):
        with pytest.raises(InputError, match="max_rows must be None or an integer of at least 2") as err:
            SVRCentre(max_rows=bad).fit(X, Y)
        assert err.value.field == "max_rows"


def test_many_rows_go_through_the_kernel_in_bounded_blocks(monkeypatch):
    import models.centres.svr as svr

    rng = np.random.default_rng(4)
    X = rng.normal(size=(500, 3))
    Y = np.c_[np.sin(X[:, 0]), X[:, 1] * X[:, 2]]
    centre = SVRCentre().fit(X, Y)
    whole = centre.predict(X)
    shapes = []
    kernel = svr.rbf_kernel_sum

    def spy(Xb, *args):
        shapes.append(len(Xb))
        return kernel(Xb, *args)

    monkeypatch.setattr(svr, "KERNEL_CELLS", 7 * centre._kernel_plan()[0][0][0].shape[1])
    monkeypatch.setattr(svr, "MIN_BLOCK_ROWS", 1)
    monkeypatch.setattr(svr, "rbf_kernel_sum", spy)
    blocks = centre.predict(X)
    np.testing.assert_allclose(blocks, whole, rtol=0, atol=1e-12)
    assert max(shapes[1:]) <= 7 and sum(shapes[1:]) == 500  # the first call splits; the blocks follow
    monkeypatch.setattr(svr, "MIN_BLOCK_ROWS", 128)  # blocks of 128 rows: BLAS gives the whole product's bits
    shapes.clear()
    np.testing.assert_array_equal(centre.predict(X), whole)
    assert shapes[1:] == [128, 128, 128, 116]
