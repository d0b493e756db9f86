"""Training a floor bundle's floor part (``lmve-train --floor-column``): the labels, the classifier chosen
like the centre, the joint calibration of every ellipsoid method, and the figures that judge it.

* :func:`floor_labels`: the (building, floor) class of every row, from the dataset's per-row columns;
* :func:`select_classifier`: every candidate of :data:`models.floors.CLASSIFIERS`, over its small
  :data:`FLOOR_GRIDS` grid, scored by k-fold (group k-fold with groups) cross-validation on the train
  part, the one of smallest Brier score chosen
  (a proper score that, unlike the log loss, stays finite for a kNN's zero probabilities); its
  out-of-fold probabilities give the floor score's training map;
* :func:`fit_floors` and :func:`conformalize_floors`: the :class:`~models.floors.FloorModel`, calibrated
  on the calibration rows (the same rule, groups and seed as the ellipses);
* :func:`bonferroni`: the baseline the joint score beats, each part calibrated at ``1 - (1 - eta) / 2``;
* :func:`floor_metrics`: joint coverage, floor hit rate of the most probable floor, set size and area.
"""

from __future__ import annotations

import numpy as np

from models import registry
from models.calibration.conformal import SplitConformalCalibrator
from models.centres.stack import fold_splits
from models.exceptions import InputError
from models.floors import CLASSIFIERS, FloorLabels, FloorModel, RankMap, all_floor_scores, floor_scores, make_classifier

#: what --floor-classifier auto chooses from
FLOOR_CANDIDATES = ("knn", "logistic")

#: each candidate's hyperparameter grid, scored by the same cross-validation: a kNN's neighbour count
#: matters to the sets (with 5 neighbours every floor none of them is on gets probability 0, so where the
#: top floor is right less often than the level asks, the sets tie and take every floor)
FLOOR_GRIDS = {"knn": ({"n_neighbors": 5}, {"n_neighbors": 10}, {"n_neighbors": 20}), "logistic": ({},)}


def floor_labels(dataset, floor_column: str, building_column: str | None = None) -> tuple[FloorLabels, np.ndarray]:
    """The classes and each row's class code from the dataset's per-row columns (``Dataset.meta``)."""
    columns = [c for c in (building_column, floor_column) if c]
    for col in columns:
        if col not in dataset.meta:
            flag = "--building-column" if col == building_column else "--floor-column"
            have = ", ".join(sorted(dataset.meta)) or "none"
            raise InputError(f"{flag} {col}: the data has no such per-row column; its label columns are {have}",
                             field=flag, expected=f"one of {have}", received=col)
    try:
        return FloorLabels.of(columns, *(dataset.meta[c] for c in columns))
    except TypeError as exc:
        raise InputError(f"--floor-column {floor_column}: {exc}", field="--floor-column",
                         expected="numbers or text", received="other values") from None


def brier(P: np.ndarray, codes: np.ndarray) -> float:
    """Mean multiclass Brier score ``sum_f (p_f - 1[f = true])^2``."""
    Q = P.copy()
    Q[np.arange(len(codes)), codes] -= 1.0
    return float(np.mean(np.einsum("ij,ij->i", Q, Q)))


def out_of_fold_proba(name: str, X: np.ndarray, codes: np.ndarray, n_classes: int, folds, params=None) -> np.ndarray:
    """(m, K) probabilities of every row from the candidate fitted on the other folds."""
    P = np.empty((len(codes), n_classes))
    for rest, fold in folds:
        P[fold] = make_classifier(name, **(params or {})).fit(X[rest], codes[rest], n_classes).predict_proba(X[fold])
    return P


def select_classifier(X: np.ndarray, codes: np.ndarray, n_classes: int, candidates=FLOOR_CANDIDATES, folds: int = 5,
                      groups=None, seed: int = 0, bar=None) -> tuple[str, dict, np.ndarray, dict]:
    """``(name, params, out-of-fold probabilities, figures)``: the candidate and the point of its
    :data:`FLOOR_GRIDS` grid of smallest cross-validated Brier score, its out-of-fold probabilities, and per
    candidate the Brier score and hit rate of its most probable class at its best point (and the grid's scores)."""
    for name in candidates:
        make_classifier(name)
    units = len(codes) if groups is None else len(np.unique(groups))
    k = min(folds, units)
    if k < 2:
        raise InputError(f"the floor classifier's cross-validation needs 2 or more train {'groups' if groups is not None else 'rows'}; "
                         f"got {units}", field="floors", expected="2 or more", received=str(units))
    splits = fold_splits(len(codes), k, seed, groups)
    figures, probas = {}, {}
    for name in candidates:
        if bar is not None:
            bar.set_postfix_str(f"floor classifier {name}")
        grid = {}
        for params in FLOOR_GRIDS.get(name, ({},)):
            P = out_of_fold_proba(name, X, codes, n_classes, splits, params)
            score = brier(P, codes)
            if name not in probas or score < figures[name]["brier"]:
                probas[name] = P
                figures[name] = {"brier": score, "hit_rate": float(np.mean(P.argmax(axis=1) == codes)), "params": params}
            grid[",".join(f"{key}={v}" for key, v in params.items()) or "default"] = score
        if len(grid) > 1:
            figures[name]["grid"] = grid
    best = min(candidates, key=lambda n: figures[n]["brier"])
    return best, figures[best]["params"], probas[best], {
        "chosen": best, "params": figures[best]["params"], "folds": k, "grouped": groups is not None, "cv": figures,
        "selected_by": f"{k}-fold {'group ' if groups is not None else ''}cross-validation on the train part (Brier "
                       "score of the class probabilities), over each candidate's grid"}


def fit_floors(X: np.ndarray, codes: np.ndarray, labels: FloorLabels, classifier: str = "auto", folds: int = 5,
               groups=None, seed: int = 0, bar=None) -> FloorModel:
    """The floor part fitted on the (standardised) train rows: the classifier (``"auto"``: chosen by
    :func:`select_classifier`), refitted on every train row, and the map of its out-of-fold floor scores."""
    candidates = FLOOR_CANDIDATES if classifier == "auto" else (classifier,)
    if classifier != "auto" and classifier not in CLASSIFIERS:
        make_classifier(classifier)  # raises, naming the choices
    name, params, P, selection = select_classifier(X, codes, len(labels), candidates, folds, groups, seed, bar)
    selection["rule"] = "auto" if classifier == "auto" else "forced"
    fitted = make_classifier(name, **params).fit(X, codes, len(labels))
    return FloorModel(fitted, labels, RankMap.fit(floor_scores(P, codes)), {}, selection)


def conformalize_floors(floors: FloorModel, methods: dict, X_train: np.ndarray, R_train: np.ndarray,
                        X_cal: np.ndarray, R_cal: np.ndarray, codes_cal: np.ndarray, rule: str = "rows",
                        groups_cal=None, seed: int = 0) -> FloorModel:
    """Calibrate the joint score of every ellipsoid method of ``methods`` (name -> fitted
    :class:`~models.predictor.SplitConformalRegressor`): its position scores on the train rows' residuals
    ``R_train`` fix its map, the calibration rows' classes and residuals give the joint scores."""
    P_cal = floors.proba(X_cal)
    for name, reg in methods.items():
        if registry.METHODS[name].kind != "ellipsoid":
            continue
        shape = reg.shape_
        floors.conformalize(name, shape.conformity_scores(X_train, R_train), P_cal, codes_cal,
                            shape.conformity_scores(X_cal, R_cal), rule, groups_cal, seed)
    return floors


def bonferroni(floors: FloorModel, reg, P_cal: np.ndarray, codes_cal: np.ndarray, eta: float,
               groups_cal=None, seed: int = 0) -> tuple[float, float]:
    """The baseline: ``(floor threshold, ellipse threshold)`` of each part calibrated alone at
    ``1 - (1 - eta) / 2`` on the same calibration rows (the same floor score, with the ellipse's rule and
    seed; the ellipse's own calibrator), so that a union bound gives ``P >= eta``."""
    half = 1.0 - (1.0 - eta) / 2.0
    floor_cal = SplitConformalCalibrator(reg.calibrator_.rule, seed).fit(floor_scores(P_cal, codes_cal), groups_cal)
    return floor_cal.quantile(half), reg.calibrator_.quantile(half)


def bonferroni_sets(P: np.ndarray, floor_threshold: float) -> np.ndarray:
    """(N, K) Bonferroni floor sets ``{f : a(x, f) <= q}`` (the most probable class always in)."""
    return all_floor_scores(P) <= floor_threshold


def floor_metrics(member: np.ndarray, P: np.ndarray, codes: np.ndarray, inside: np.ndarray,
                  area: np.ndarray) -> dict:
    """Figures of floor sets ``member`` (N, K) with ellipses (``inside`` (N,), ``area`` (N,)) on test rows of
    true classes ``codes``: joint coverage, hit rate of the most probable class, set size, area, and the
    mean of set size times area (the volume of the region in floors x plane)."""
    floor_in = member[np.arange(len(codes)), codes]
    size = member.sum(axis=1)
    return {"joint_coverage": float(np.mean(floor_in & inside)), "floor_coverage": float(np.mean(floor_in)),
            "position_coverage": float(np.mean(inside)), "floor_hit_rate": float(np.mean(P.argmax(axis=1) == codes)),
            "set_size_mean": float(size.mean()), "area_mean": float(np.mean(area)),
            "region_mean": float(np.mean(size * area)), "n_test": int(len(codes))}


def held_out_floor_metrics(model, X_raw: np.ndarray, Y: np.ndarray, codes: np.ndarray, centers=None) -> dict:
    """Per ellipsoid method of a floor model, :func:`floor_metrics` of its answers on raw test rows."""
    out = {}
    for name in model.floors.joint:
        answer = model.predict_region(X_raw, method=name, centers=centers, typicality=False)
        region = answer.regions
        out[name] = floor_metrics(answer.floors.member, answer.floors.proba, codes, region.contains(Y),
                                  region.volume("lebesgue"))
    return out


def floor_classes(dataset, config) -> tuple[FloorLabels, np.ndarray] | None:
    """``(labels, codes)`` of ``config.floor_column`` (and ``building_column``), checked before any fit;
    ``None`` without floors."""
    if config.floor_column is None:
        if config.building_column is not None:
            raise InputError("--building-column pairs buildings with floors; name the floors with --floor-column",
                             field="--building-column", expected="with --floor-column", received="alone")
        return None
    if config.calibrate_across:
        raise InputError("--floor-column and --calibrate-across do not combine yet: the joint calibration of floors "
                         "is for rows (or groups) held out of training, not cross-fitted units", field="--floor-column",
                         expected="no --calibrate-across", received=f"--calibrate-across {','.join(config.calibrate_across)}")
    if config.floor_classifier != "auto":
        make_classifier(config.floor_classifier)
    return floor_labels(dataset, config.floor_column, config.building_column)
