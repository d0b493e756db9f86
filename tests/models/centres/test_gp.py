"""The Gaussian process centre: numpy evaluation against scikit-learn's posterior mean, its marginal
likelihood and gradient against scikit-learn's, relevance determination, the row and iteration caps,
checked input."""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor

from models.centres import GPCentre
from models.centres.gp import fit_hyperparameters, log_marginal_likelihood
from models.exceptions import InputError


def _data(m=300, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(m, d))
    Y = np.c_[10 + 3 * np.sin(np.pi * X[:, 0]), 0.01 * X[:, 1] ** 2] + rng.normal(scale=[0.1, 0.001], size=(m, 2))
    return X, Y


def test_numpy_evaluation_matches_sklearn_posterior_mean():
    """The stored kernel sum is scikit-learn's posterior mean with the fitted kernel, on the conditioning
    rows, mapped back to target units; it survives the bundle's arrays."""
    X, Y = _data()
    centre = GPCentre(search_rows=150, seed=3).fit(X, Y)
    Xt = np.random.default_rng(1).uniform(-1, 1, size=(40, 5))
    mean, scale = Y.mean(0), Y.std(0)
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    # the fitted kernel rebuilt from what the centre learned, scikit-learn conditioned on all rows (m <= max_rows)
    gp = GaussianProcessRegressor(optimizer=None)
    kernel = ConstantKernel(centre.amplitude_) * RBF(centre.length_scale_) + WhiteKernel(centre.noise_)
    ref = gp.set_params(kernel=kernel).fit(X, (Y - mean) / scale).predict(Xt) * scale + mean
    np.testing.assert_allclose(centre.predict(Xt), ref, rtol=1e-9, atol=1e-9)
    again = GPCentre.from_arrays(*centre.to_arrays())
    np.testing.assert_allclose(again.predict(Xt), ref, rtol=1e-12, atol=1e-12)
    assert again.get_params() == centre.get_params() and again.n_features_in_ == 5 and again.n_targets_ == 2


@pytest.mark.slow
def test_irrelevant_features_get_long_length_scales():
    """With one length scale per feature the one that carries the signal keeps a short scale and
    those that carry nothing are stretched; above ``ard_max_features`` one scale is shared."""
    X, Y = _data(m=400)
    ard = GPCentre(search_rows=400).fit(X, Y)
    assert ard.length_scale_[0] < 2.0 and ard.length_scale_[0] * 10 < ard.length_scale_[2:].min()
    shared = GPCentre(search_rows=200, ard_max_features=4).fit(X, Y)
    assert np.ptp(shared.length_scale_) == 0.0
    fitted = ard.predict(X)
    assert np.sqrt(np.mean((fitted[:, 0] - Y[:, 0]) ** 2)) < 0.2  # the noise's 0.1, the target's spread 2.1


def test_row_caps_subset_the_conditioning_rows():
    X, Y = _data(m=120)
    centre = GPCentre(search_rows=60, max_rows=50, seed=1).fit(X, Y)
    assert centre.rows_.shape == (50, 5) and centre.weights_.shape == (50, 2)
    # the rows kept are training rows (divided by the length scales), in their original order
    kept = centre.rows_ * centre.length_scale_
    index = [int(np.flatnonzero(np.all(np.isclose(X, r), axis=1))[0]) for r in kept]
    assert index == sorted(index) and len(set(index)) == 50
    assert GPCentre(search_rows=60, max_rows=50, seed=2).fit(X, Y).rows_.tolist() != centre.rows_.tolist()


@pytest.mark.parametrize("ard", [True, False])
def test_log_marginal_likelihood_and_gradient_are_sklearns(ard):
    """Value and gradient in log hyperparameters equal scikit-learn's for the same kernel, at points away
    from the start (one length scale per feature, or one shared)."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    X, Y = _data(m=120)
    Z = (Y - Y.mean(0)) / Y.std(0)
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(5) if ard else 1.0, (1e-2, 1e5)) + WhiteKernel(0.1, (1e-6, 10))
    gp = GaussianProcessRegressor(kernel, optimizer=None).fit(X, Z)
    rng = np.random.default_rng(4)
    for _ in range(3):
        theta = rng.normal(scale=1.5, size=kernel.theta.shape)
        ref, ref_grad = gp.log_marginal_likelihood(theta, eval_gradient=True)
        value, grad = log_marginal_likelihood(theta, X, Z)
        assert value == pytest.approx(ref, rel=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-8 * np.abs(ref_grad).max())


def test_search_reaches_sklearns_optimum_within_the_iteration_cap():
    """Uncapped, the search ends where scikit-learn's own fit does (same start, bounds, objective); capped,
    it stops after ``max_iter`` iterations at a likelihood no better than the optimum's."""
    X, Y = _data(m=150)
    Z = (Y - Y.mean(0)) / Y.std(0)
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(5), (1e-2, 1e5)) + WhiteKernel(0.1, (1e-6, 10))
    ref = GaussianProcessRegressor(kernel).fit(X, Z)
    c, length, noise, iterations = fit_hyperparameters(X, Z, max_iter=1000)
    best = log_marginal_likelihood(np.log(np.r_[c, length, noise]), X, Z)[0]
    assert best == pytest.approx(ref.log_marginal_likelihood_value_, abs=1e-3) and 2 < iterations < 1000
    *_, few = fit_hyperparameters(X, Z, max_iter=2)
    assert few == 2
    centre = GPCentre(search_rows=150, max_iter=3).fit(X, Y)
    assert centre.search_iterations_ == 3


@pytest.mark.parametrize("field,value", [("search_rows", 1), ("max_rows", 0), ("max_rows", 2.5)])
def test_bad_row_caps_name_the_field(field, value):
    X, Y = _data(m=20)
    with pytest.raises(InputError, match=f"{field} must be an integer of at least 2; got {value!r}") as info:
        GPCentre(**{field: value}).fit(X, Y)
    assert info.value.field == field


@pytest.mark.parametrize("value", [0, 2.5, True])
def test_bad_iteration_cap_names_the_field(value):
    X, Y = _data(m=20)
    with pytest.raises(InputError, match=f"max_iter must be a positive integer; got {value!r}") as info:
        GPCentre(max_iter=value).fit(X, Y)
    assert info.value.field == "max_iter"
