"""Floors beside the ellipse: a calibrated set of (building, floor) candidates with one joint guarantee.

A floor bundle answers each query with an ellipse in the survey's plane *and* a set ``F(x)`` of floor
labels (a floor, or a (building, floor) pair), such that for a new row

    P[ true floor in F(x)  and  true position in the ellipse ] >= eta

with the finite-sample split-conformal guarantee, calibrated once on one scalar score:

- the floor score ``a(x, f) = 1 - p(f | x)`` (0 for the most probable floor, so no set is empty) and the
  position score ``M(x, y)``, each through a fixed increasing map fitted on *training* rows only
  (``RankMap``): ``u = G_a(a)``, ``v = G_M(M)``;
- the joint score ``s = max(G_a(a), G_M(M))`` of every calibration row, and ``t_q``, its conformal quantile;
- the region ``{f : G_a(1 - p(f | x)) <= t_q}`` times the ellipse ``{y : M(x, y) <= G_M^{-1}(t_q)}``.

The map ``s`` is fixed before the calibration rows are read, so their joint scores and a new row's are
exchangeable and ``P >= eta`` holds (``P <= eta + 1/(m + 1)`` without ties); ``docs/concepts/floors.md``
gives the proof and the choice of maps. A bundle without floors has no ``FloorModel``.

Classifiers (``CLASSIFIERS``): ``"knn"`` (distance-weighted k-NN on one-hot labels, the same search as a
kNN centre) and ``"logistic"`` (multinomial, evaluated in numpy). The package: ``classifiers``, ``labels``
(labels as class codes) and ``joint`` (the common scale, the joint calibration and the answer); its
names are importable from :mod:`models.floors`."""

from __future__ import annotations

from models.floors.classifiers import CLASSIFIERS, KNNFloors, LogisticFloors, make_classifier
from models.floors.joint import (FloorAnswer, FloorModel, JointCalibration, RankMap, all_floor_scores,
                                 floor_scores)
from models.floors.labels import FloorLabels, label_key

__all__ = ["CLASSIFIERS", "FloorAnswer", "FloorLabels", "FloorModel", "JointCalibration", "KNNFloors",
           "LogisticFloors", "RankMap", "all_floor_scores", "floor_scores", "label_key", "make_classifier"]
