"""Floors beside the ellipse: a calibrated set of (building, floor) candidates with one joint guarantee.

A floor bundle answers each query with an ellipse in the survey's plane *and* a set ``F(x)`` of
floor labels (a floor, or a (building, floor) pair), such that for a new row

    P[ true floor in F(x)  and  true position in the ellipse ] >= eta

with the finite-sample split-conformal guarantee, calibrated once (SPEC section 9, "one scalar,
nested regions"). Construction, per ellipsoid method:

* the floor score ``a(x, f) = 1 - p(f | x)``, ``p`` a classifier's probability (the score of
  least ambiguous set-valued classifiers: Sadinle, Lei & Wasserman, JASA 2019), except that the most
  probable floor scores 0 (it is always in the set, and the calibration knows it), and the position
  score ``M(x, y)``, the method's conformity score (the Mahalanobis distance of the residual);
* each score through a fixed increasing map fitted on *training* rows only (:class:`RankMap`: the
  piecewise-linear interpolation of its training scores' empirical distribution function), so both
  parts live on one scale: ``u = G_a(a)``, ``v = G_M(M)``. The floor part's training scores are
  out-of-fold (a classifier is sure of its own training rows);
* the joint score ``s(x, f, y) = max(G_a(a(x, f)), G_M(M(x, y)))`` of every calibration row, and
  ``t_q``, its conformal quantile (``ceil((m + 1) eta)``-th smallest; one score per group under a
  group rule, as for the ellipse alone);
* the region ``R(x) = {(f, y) : G_a(a(x, f)) <= t_q and G_M(M(x, y)) <= t_q}``: the floor set
  ``{f : G_a(1 - p(f | x)) <= t_q}`` times the ellipse ``{y : M(x, y) <= G_M^{-1}(t_q)}``.

Proof of the guarantee: ``(f*, y*)`` lies in ``R(x)`` exactly when ``s(x, f*, y*) <= t_q``. The map
``s`` was fixed before the calibration rows were read (classifier, shapes and both maps are fitted
on training rows), so the joint scores of the calibration rows and of a new row are exchangeable,
and the conformal quantile's usual argument (:mod:`models.calibration.conformal`) gives
``P >= eta``, and ``P <= eta + 1/(m + 1)`` without ties. No union bound is spent: Bonferroni would
calibrate each part at ``1 - (1 - eta) / 2`` and pay for both. The most probable floor scoring 0, no
floor set is empty (an empty set would make the region empty).

The maps fix how the two parts share the miss rate ``1 - eta`` (each at about the same training
rank), never whether the guarantee holds. A bundle without floors has no :class:`FloorModel` and
answers exactly as before.

Classifiers (:data:`CLASSIFIERS`): ``"knn"``, scikit-learn's ``KNeighborsClassifier(weights="distance")``
rule computed as a :class:`~models.centres.knn.KNNCentre` on one-hot labels (the same search, and in one
request the same distances, as a kNN centre on the same rows); ``"logistic"``, scikit-learn's
``LogisticRegression`` (multinomial), stored as its coefficients and evaluated in numpy.

The package: :mod:`models.floors.classifiers` (the floor classifiers, fitted like the centres),
:mod:`models.floors.labels` (labels as class codes) and :mod:`models.floors.joint` (the common scale, the
joint calibration and the answer). Its names are importable from ``models.floors``.
"""

from __future__ import annotations

from models.floors.classifiers import CLASSIFIERS, KNNFloors, LogisticFloors, make_classifier
from models.floors.joint import (FloorAnswer, FloorModel, JointCalibration, RankMap, all_floor_scores,
                                 floor_scores)
from models.floors.labels import FloorLabels, label_key

__all__ = ["CLASSIFIERS", "FloorAnswer", "FloorLabels", "FloorModel", "JointCalibration", "KNNFloors",
           "LogisticFloors", "RankMap", "all_floor_scores", "floor_scores", "label_key", "make_classifier"]
