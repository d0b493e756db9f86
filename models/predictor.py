"""Split-conformal region regression: ``fit`` -> ``conformalize`` -> ``predict_region``.

>>> reg = SplitConformalRegressor(GaussianEllipsoid(), centre=SVRCentre(), coverage=0.9)
>>> reg.fit(X_train, Y_train).conformalize(X_cal, Y_cal)          # doctest: +SKIP
>>> regions = reg.predict_region(X_test)                           # doctest: +SKIP
>>> regions.contains(Y_test).mean()   # ~0.9, and >= 0.9 in expectation   # doctest: +SKIP

The centre and the shape are fitted on the training rows only; the calibration rows only set
the threshold. The regressor owns the coverage level: it calibrates at it, and a shape that
tunes itself to a level (LMVE) is fitted for it. ``predict_region(X, coverage=0.95)`` answers
another level from the stored calibration scores without refitting.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, clone

from models._validation import check_coverage, check_is_fitted, check_matrix, check_same_rows
from models.centres import SVRCentre
from models.calibration.conformal import SplitConformalCalibrator


class SplitConformalRegressor(BaseEstimator):
    """A centre, a shape method and a split-conformal calibrator.

    ``fit``, ``conformalize`` and the public prediction methods check their input, then call the
    ``_regions``/``_scores`` internals on the checked arrays. :class:`~models.model.RegionModel` checks its
    input once and reads the fitted ``shape_`` and ``calibrator_`` itself; it calls neither internal.

    Parameters
    ----------
    shape : ShapeEstimator
        GE, NLE, LMVE or Copula (unfitted; it is cloned in ``fit``).
    centre : estimator with fit/predict, default=None
        ``None`` means ``SVRCentre()`` (the paper's).
    coverage : float in (0, 1), default=0.9
        The level: calibrated at, and tuned for by shapes with ``tunes_to_coverage``.
    prefit_centre : bool, default=False
        The centre is already fitted (share one centre between several methods).
    calibration : {"rows", "group-subsample", "group-pooled"}, default="rows"
        How calibration scores become thresholds (:mod:`models.calibration.conformal`); the group rules need
        ``conformalize(..., groups=...)`` and cover a new row from a new group.
    random_state : int, default=0
        Seed of the group-subsample draw.

    Attributes
    ----------
    centre_, shape_ : the fitted centre and shape
    calibrator_ : SplitConformalCalibrator
    alpha_q_ : float
        Threshold at ``coverage``.
    """

    def __init__(self, shape, centre=None, coverage: float = 0.9, prefit_centre: bool = False,
                 calibration: str = "rows", random_state: int = 0):
        self.shape = shape
        self.centre = centre
        self.coverage = coverage
        self.prefit_centre = prefit_centre
        self.calibration = calibration
        self.random_state = random_state

    @classmethod
    def from_fitted(cls, centre, shape, calibrator: SplitConformalCalibrator, coverage: float):
        """Assemble a conformalized regressor from already fitted parts (what loading a bundle does).

        Parameters
        ----------
        centre : fitted centre
            Predicts the centre of every region.
        shape : fitted ShapeEstimator
            The region's shape around the centre.
        calibrator : SplitConformalCalibrator
            Holds the calibration scores; its rule becomes ``calibration``.
        coverage : float in (0, 1)
            The fitted level; ``alpha_q_`` is the calibrator's threshold at it.

        Returns
        -------
        SplitConformalRegressor
            Ready for ``predict_region``.
        """
        reg = cls(shape=shape, centre=centre, coverage=coverage, prefit_centre=True, calibration=calibrator.rule)
        reg.centre_, reg.shape_, reg.calibrator_ = centre, shape, calibrator
        reg.alpha_q_ = calibrator.quantile(coverage)
        return reg

    # ------------------------------------------------------------------ training (checked)
    def _check_rows(self, X, Y, centers, fitted: bool):
        n_features = self.shape_.n_features_in_ if fitted else None
        n_targets = self.shape_.n_targets_ if fitted else None
        X = check_matrix(X, "X", n_columns=n_features, owner="the fitted shape" if fitted else None,
                         min_rows=1 if fitted else 2)
        Y = check_matrix(Y, "Y", n_columns=n_targets, owner="the fitted shape" if fitted else None,
                         min_rows=1 if fitted else 2)
        check_same_rows(X, Y, "X", "Y")
        if centers is not None:
            centers = check_matrix(centers, "centers", n_columns=Y.shape[1])
            check_same_rows(X, centers, "X", "centers")
        return X, Y, centers

    def fit(self, X, Y, centers=None, groups=None) -> "SplitConformalRegressor":
        """Fit the centre (unless prefit) and the shape on the training rows.

        The shape is fitted on the residuals ``R = Y - centre(X)``; a shape that tunes itself to a
        level (LMVE) is fitted for ``coverage``.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Features of the training rows.
        Y : array-like of shape (m, n)
            Their true positions.
        centers : array-like of shape (m, n), default=None
            Replaces the centre's predictions in the residuals (out-of-fold centres, or a client's
            own estimates).
        groups : array-like of shape (m,), default=None
            The rows' groups, for shapes that hold rows out (LMVE holds out whole groups).

        Returns
        -------
        self : SplitConformalRegressor
            Fitted, not yet conformalized.

        Raises
        ------
        InputError
            ``coverage`` outside (0, 1), fewer than two rows, non-finite values, or ``X``, ``Y`` and
            ``centers`` disagreeing in rows or columns.
        NotFittedError
            ``prefit_centre`` with a centre that was never fitted.
        """
        eta = check_coverage(self.coverage)
        X, Y, centers = self._check_rows(X, Y, centers, fitted=False)
        if self.prefit_centre:
            check_is_fitted(self.centre, "n_features_in_", "used as a prefit centre")
            self.centre_ = self.centre
        else:
            self.centre_ = clone(self.centre if self.centre is not None else SVRCentre()).fit(X, Y)
        R = Y - (self.centre_.predict(X) if centers is None else centers)
        shape = clone(self.shape)
        self.shape_ = shape.fit(X, R, coverage=eta, groups=groups) if shape.tunes_to_coverage else shape.fit(X, R)
        self.calibrator_ = None
        return self

    def conformalize(self, X, Y, centers=None, groups=None) -> "SplitConformalRegressor":
        """Score the calibration rows and store their scores: the step that makes the guarantee.

        The rows must not have been seen by ``fit``. Under ``calibration="rows"`` a new row exchangeable
        with them is covered with probability at least ``coverage``; under the group rules, a new row
        from a new group.

        Parameters
        ----------
        X : array-like of shape (k, d)
            Features of the calibration rows.
        Y : array-like of shape (k, n)
            Their true positions.
        centers : array-like of shape (k, n), default=None
            Replaces the centre's predictions.
        groups : array-like of shape (k,), default=None
            The rows' groups; needed by the group calibration rules.

        Returns
        -------
        self : SplitConformalRegressor
            Conformalized: ``calibrator_`` and ``alpha_q_`` are set.

        Raises
        ------
        NotFittedError
            Called before ``fit``.
        InputError
            Rows that do not match the fitted shape, or a group rule without ``groups``.
        """
        check_is_fitted(self, "shape_", "conformalized")
        X, Y, centers = self._check_rows(X, Y, centers, fitted=True)
        R = Y - (self.centre_.predict(X) if centers is None else centers)
        self.shape_.prepare_calibration(X, R)
        self.calibrator_ = SplitConformalCalibrator(self.calibration, self.random_state).fit(
            self.shape_.conformity_scores(X, R), groups)
        self.alpha_q_ = self.calibrator_.quantile(check_coverage(self.coverage))
        return self

    # ------------------------------------------------------------------ internals (checked rows)
    def threshold(self, coverage: float | None) -> float:
        """The threshold ``alpha_q`` on conformity scores at a level.

        Parameters
        ----------
        coverage : float in (0, 1) or None
            A level already checked against the calibrator; ``None`` is the fitted level.

        Returns
        -------
        float
            The finite-sample conformal quantile of the calibration scores at ``coverage``.
        """
        return self.alpha_q_ if coverage is None else self.calibrator_.quantile(coverage)

    def _regions(self, X: np.ndarray, coverage: float | None, centers: np.ndarray):
        eta = self.coverage if coverage is None else coverage
        return self.shape_.region(X, centers, self.threshold(coverage), eta)

    def _scores(self, X: np.ndarray, Y: np.ndarray, centers: np.ndarray) -> np.ndarray:
        return self.shape_.conformity_scores(X, Y - centers)

    # ------------------------------------------------------------------ prediction (checked)
    def _check_predict(self, X, coverage, centers):
        check_is_fitted(self, "calibrator_", "asked for regions (call fit, then conformalize)")
        X = check_matrix(X, "X", n_columns=self.shape_.n_features_in_, owner="the fitted shape")
        if coverage is not None:
            coverage = self.calibrator_.check_level(coverage)
        if centers is None:
            centers = self.centre_.predict(X)
        else:
            centers = check_matrix(centers, "centers", n_columns=self.shape_.n_targets_)
            check_same_rows(X, centers, "X", "centers")
        return X, coverage, centers

    def predict_region(self, X, coverage: float | None = None, centers=None):
        """Calibrated regions for new rows.

        Parameters
        ----------
        X : array-like of shape (N, d)
            Features of the rows.
        coverage : float in (0, 1), default=None
            The level; ``None`` is the fitted level. Another level is answered from the stored
            calibration scores, without refitting.
        centers : array-like of shape (N, n), default=None
            Replaces the centre's predictions.

        Returns
        -------
        EllipsoidRegions or BoxRegions
            One region per row; each holds its row's true position with probability at least
            ``coverage`` (marginally, over calibration and test draws).

        Raises
        ------
        NotFittedError
            Called before ``conformalize``.
        InputError
            ``X`` or ``centers`` of the wrong shape, or a level the calibration cannot reach.
        """
        X, coverage, centers = self._check_predict(X, coverage, centers)
        return self._regions(X, coverage, centers)

    def conformity_scores(self, X, Y, centers=None) -> np.ndarray:
        """The conformity scores of points given their rows: the smallest threshold whose region holds them.

        Parameters
        ----------
        X : array-like of shape (N, d)
            Features of the rows.
        Y : array-like of shape (N, n)
            The points to score.
        centers : array-like of shape (N, n), default=None
            Replaces the centre's predictions.

        Returns
        -------
        ndarray of shape (N,)
            A point lies in its row's region at threshold ``alpha_q`` exactly when its score is at most
            ``alpha_q``.

        Raises
        ------
        NotFittedError
            Called before ``conformalize``.
        InputError
            ``X``, ``Y`` or ``centers`` of the wrong shape.
        """
        X, _, centers = self._check_predict(X, None, centers)
        Y = check_matrix(Y, "Y", n_columns=self.shape_.n_targets_, owner="the fitted shape")
        check_same_rows(X, Y, "X", "Y")
        return self._scores(X, Y, centers)

    def p_value(self, X, Y, centers=None) -> np.ndarray:
        """Conformal p-values of points given their rows.

        Parameters
        ----------
        X : array-like of shape (N, d)
            Features of the rows.
        Y : array-like of shape (N, n)
            The points to test.
        centers : array-like of shape (N, n), default=None
            Replaces the centre's predictions.

        Returns
        -------
        ndarray of shape (N,)
            ``(1 + #{calibration scores >= score}) / (k + 1)``: small when a point is unusual for its row.
        """
        return self.calibrator_.p_value(self.conformity_scores(X, Y, centers))
