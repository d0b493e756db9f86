"""The kNN centre against scikit-learn's KNeighborsRegressor, and its bundle round trip."""

import numpy as np
import pytest

from models.exceptions import InputError


def test_knn_centre_matches_sklearn_and_round_trips():
    from sklearn.neighbors import KNeighborsRegressor

    from models.centres import KNNCentre

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(120, 4)), rng.normal(size=(120, 2))
    Q = np.vstack([rng.normal(size=(30, 4)), X[:5]])  # and exact matches (zero distance)
    c = KNNCentre(n_neighbors=3).fit(X, Y)
    np.testing.assert_allclose(c.predict(Q), KNeighborsRegressor(3, weights="distance").fit(X, Y).predict(Q), rtol=0,
                               atol=1e-12)  # numpy's sums in another order than scikit-learn's
    np.testing.assert_array_equal(c.predict(X[:5]), Y[:5])
    again = KNNCentre.from_arrays(*c.to_arrays())
    np.testing.assert_array_equal(again.predict(Q), c.predict(Q))
    assert KNNCentre(n_neighbors=10).fit(X[:4], Y[:4]).predict(Q).shape == (35, 2)  # k capped at the rows
    with pytest.raises(InputError, match="n_neighbors must be a positive integer; got 0"):
        KNNCentre(n_neighbors=0).fit(X, Y)


def test_the_reference_rows_are_capped_at_max_rows():
    from models.centres import KNNCentre
    from models.centres.base import capped_rows

    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(400, 5)), rng.normal(size=(400, 2))
    capped = KNNCentre(max_rows=150, seed=1).fit(X, Y)
    rows = capped_rows(400, 150, seed=1)
    assert capped.X_fit_.shape == (150, 5)
    np.testing.assert_array_equal(capped.predict(X), KNNCentre(max_rows=None).fit(X[rows], Y[rows]).predict(X))
    assert KNNCentre().fit(X, Y).X_fit_.shape == (400, 5)  # under the default cap: every row
    with pytest.raises(InputError, match="max_rows"):
        KNNCentre(max_rows=0).fit(X, Y)
