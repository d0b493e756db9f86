"""models/registry.py and models/centres/kinds.py: every registered centre and shape method passes the common
checks (as scikit-learn's ``parametrize_with_checks``), and an incomplete entry is refused when it is made, at
import, naming what it lacks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from models import registry
from models.centres.base import Centre
from models.centres.kinds import KINDS, TYPES, CentreSpec
from models.exceptions import InputError, NotFittedError
from models.registry import MethodSpec
from models.shapes import EmpiricalCopulaBox, GaussianEllipsoid
from tests.conftest import heteroscedastic
from tests.models.shapes import FAST_LMVE

#: small hyperparameters where a default would take long (the checks are about the contract, not quality)
FAST = {"lmve": FAST_LMVE, "mlp": {"max_steps": 100, "eval_every": 25}}


def _rows(n: int = 240, seed: int = 0):
    """Readings of 8 beacons in dBm (what the fingerprint centre reads as well as the others) and positions."""
    rng = np.random.default_rng(seed)
    Y = rng.uniform(0, 20, size=(n, 2))
    beacons = rng.uniform(0, 20, size=(8, 2))
    X = -40 - 20 * np.log10(1 + np.linalg.norm(Y[:, None] - beacons[None], axis=2)) + rng.normal(0, 2, (n, 8))
    return X, Y


@pytest.mark.parametrize("name", list(registry.CENTRES))
def test_every_registered_centre_fits_predicts_stores_and_refuses_bad_rows(name):
    X, Y = _rows()
    centre = registry.centre(name).make(**FAST.get(name, {}))
    assert isinstance(centre, Centre) and type(centre).__name__ in registry.CENTRE_TYPES
    assert centre.fit(X[:200], Y[:200]) is centre
    predicted = centre.predict(X[200:])
    assert predicted.shape == (40, 2) and np.isfinite(predicted).all()
    params, arrays = centre.to_arrays()
    stored = registry.CENTRE_TYPES[type(centre).__name__].from_arrays(params, arrays)
    np.testing.assert_array_equal(stored.predict(X[200:]), predicted)  # the bundle's centre answers the same
    assert clone(centre).get_params() == centre.get_params()
    bad = X[:200].copy()
    bad[5, 3] = np.nan
    with pytest.raises(InputError):
        clone(centre).fit(bad, Y[:200])


@pytest.mark.parametrize("name", list(registry.METHODS))
def test_every_registered_method_scores_stores_and_is_refused_before_fit(name):
    X, R = heteroscedastic(400, seed=3)
    spec = registry.method(name)
    shape = spec.make(seed=0, **FAST.get(name, {}))
    with pytest.raises(NotFittedError):
        shape.conformity_scores(X[:3], R[:3])
    assert shape.fit(X[:300], R[:300]) is shape
    shape.prepare_calibration(X[300:], R[300:])  # the hook the regressor runs before it scores calibration rows
    scores = shape.conformity_scores(X[300:], R[300:])
    assert scores.shape == (100,) and np.isfinite(scores).all()
    level = 0.8
    alpha_q = float(np.quantile(scores, level))
    region = shape.region(X[300:], np.zeros_like(R[300:]), alpha_q, level)
    assert region.contains(R[300:]).mean() == pytest.approx(np.mean(scores <= alpha_q))  # the score is the region
    assert (region.kind if hasattr(region, "kind") else spec.kind) == spec.kind
    params, arrays = shape.to_arrays()
    np.testing.assert_array_equal(spec.estimator.from_arrays(params, arrays).conformity_scores(X[300:], R[300:]),
                                  scores)


def test_the_bundle_types_are_every_kind_s_class_and_the_auto_candidates_are_registered():
    assert {s.estimator for s in KINDS.values()} <= set(TYPES.values())
    from models.centres.kinds import CANDIDATES

    assert set(CANDIDATES) <= set(KINDS) and "mlp" not in CANDIDATES


class _HalfCentre(Centre):
    """A centre that forgot ``predict`` and the bundle protocol."""

    def fit(self, X, Y):
        return self


def test_an_incomplete_centre_entry_is_refused_when_made_naming_what_it_lacks():
    with pytest.raises(TypeError, match="does not implement from_arrays, predict, to_arrays"):
        CentreSpec("half", "a centre without predict", _HalfCentre, cost=(0.01, 1.0))
    with pytest.raises(TypeError, match="cost must be two positive numbers"):
        CentreSpec("knn2", "kNN without a cost", KINDS["knn"].estimator, {"n_neighbors": 2})
    with pytest.raises(TypeError, match="is not a Centre"):
        CentreSpec("gauss", "a shape, not a centre", GaussianEllipsoid, cost=(0.01, 1.0))


def test_an_incomplete_method_entry_is_refused_when_made():
    with pytest.raises(TypeError, match="an ellipsoid method's estimator is an EllipsoidShapeEstimator"):
        MethodSpec("box", "Box", EmpiricalCopulaBox, "ellipsoid", fallback_rank=None)
    with pytest.raises(TypeError, match="kind must be"):
        MethodSpec("ge2", "GE", GaussianEllipsoid, "circle", fallback_rank=None)
    with pytest.raises(TypeError, match="needs a name and words"):
        MethodSpec("ge3", "", GaussianEllipsoid, "ellipsoid", fallback_rank=None)


def test_a_module_registering_an_incomplete_centre_fails_at_import(tmp_path):
    """The refusal happens at import: a module adding a kind without its cost never loads."""
    import subprocess
    import sys

    (tmp_path / "site_kinds.py").write_text(
        "from models.centres.kinds import KINDS, CentreSpec\n"
        "from models.centres.knn import KNNCentre\n"
        "KINDS['knn5'] = CentreSpec('knn5', '5 nearest rows', KNNCentre, {'n_neighbors': 5})\n")
    done = subprocess.run([sys.executable, "-c", "import site_kinds"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{tmp_path}:{__import__('os').getcwd()}", "PATH": ""})
    assert done.returncode == 1 and "TypeError: centre 'knn5': cost must be two positive numbers" in done.stderr
