"""Recalibrate a fitted model from fresh labelled rows: shared by ``lmve-recalibrate`` and
``POST /admin/recalibrate``, which write the result with :func:`models.bundle.save_recalibrated`.

The new bundle keeps the parent's preprocessing, scaler, centre and shapes; only the calibration
scores change (:meth:`models.model.RegionModel.recalibrated`). Fresh rows are grouped as ``train()`` groups
a survey (:mod:`models.calibration.grouping`: each position a group when most rows repeat one), so the
guarantee stays one for readings at new positions; ``groups=None`` keeps the row rule. The manifest records the parent's
bundle id, the rows and groups used, the source and when, states the guarantee in words
(:func:`models.calibration.conformal.guarantee_words`), and carries a survey's scale with its mean area
taken over the fresh rows (:func:`models.scale.rescaled`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from models.calibration.conformal import APPROXIMATE_RULES, guarantee_terms, guarantee_words
from models.calibration.grouping import AUTO, GROUP_RULES, position_codes, share_of_repeated_positions

if TYPE_CHECKING:  # a type only
    from models.model import RegionModel

__all__ = ["AUTO", "GROUP_RULES", "Recalibration", "recalibrate", "stated_guarantee", "threshold_changes"]


@dataclass(frozen=True)
class Recalibration:
    """What :func:`recalibrate` returns: the new model and what its manifest records.

    Attributes
    ----------
    model : RegionModel
        The parent's preprocessing, scaler, centre and shapes, calibrated on the fresh rows.
    calibration : dict
        The manifest's ``calibration``: grouping, the share of repeated positions, exactness, the
        guarantee and a survey's rescaled scale.
    training : dict
        The parent's ``training``, with ``recalibrated``: the parent's bundle id, rows, groups, source,
        the parent's guarantee and when.
    n_rows : int
        Fresh rows scored.
    n_groups : int or None
        Fresh groups, under a group rule.
    """
    model: RegionModel
    calibration: dict
    training: dict
    n_rows: int
    n_groups: int | None
    guarantee: str
    """The words of the guarantee (also ``calibration["guarantee"]``)."""
    grouped_by: str
    """How the rows were grouped: ``"rows"``, ``"position"`` (automatically) or ``"labels"`` (given)."""
    repeated_share: float
    """The share of the fresh rows that repeat another row's position."""


def recalibrate(parent: RegionModel, features, points, *, groups=AUTO, grouping: list[str] | None = None,
                centers=None, group_rule: str = "subsample", seed: int = 0, source: dict | None = None,
                floors=None, buildings=None) -> Recalibration:
    """A model recalibrated on fresh labelled rows; ``parent`` is never modified.

    Parameters
    ----------
    parent : RegionModel
        The served model.
    features : array-like of shape (k, d)
        Raw features of the fresh rows.
    points : array-like of shape (k, n)
        Their true positions.
    groups : array-like of shape (k,), "auto" or None, default="auto"
        Labels: one score per group under ``group_rule``. :data:`AUTO`: each position a group when the rows are a
        survey (:func:`models.calibration.grouping.position_codes`), else rows. ``None``: rows.
    grouping : list of str, default=None
        The columns the labels came from, for the manifest.
    centers : array-like of shape (k, n), default=None
        The client's estimates (client-centre bundles only).
    group_rule : {"subsample", "pooled"}, default="subsample"
        How groups' scores become a threshold (:data:`GROUP_RULES`).
    seed : int, default=0
        Seeds the group-subsample draw.
    source : dict, default=None
        Where the rows came from (a file, a request), for the manifest.
    floors : array-like of shape (k,), default=None
        The rows' true floors; required by a floor bundle.
    buildings : array-like of shape (k,), default=None
        Their buildings, when floors are (building, floor) pairs.

    Returns
    -------
    Recalibration

    Raises
    ------
    InputError
        Rows that do not fit the bundle, or too few rows or groups to attain its level (the message names
        the highest they attain).
    """
    repeated = share_of_repeated_positions(points)
    grouped_by = "labels"
    if isinstance(groups, str) and groups == AUTO:
        groups = position_codes(points)
        grouping, grouped_by = (None, "rows") if groups is None else (["position"], "position")
    elif groups is None:
        grouped_by = "rows"
    rule = None if groups is None else GROUP_RULES[group_rule]
    model = parent.recalibrated(features, points, groups=groups, centers=centers, rule=rule, random_state=seed,
                                floors=floors, buildings=buildings)
    cal = next(iter(model.methods.values())).calibrator_
    n_rows = int(cal.n_rows_)
    n_groups = None if groups is None else int(cal.n_calibration_)
    src = dict(source or {})
    words = guarantee_words(model.coverage, cal.rule, _unit(grouped_by, grouping, src.get("file")), n_rows, n_groups,
                            on="fresh")
    m = parent.manifest
    exact = cal.rule not in APPROXIMATE_RULES
    calibration = {"grouping": list(grouping) if grouping else None, "grouped_by": grouped_by, "n_groups": n_groups,
                   "repeated_share": repeated, "mode": "recalibrated", "exact": exact, "guarantee": words,
                   "terms": guarantee_terms(model.coverage, cal.rule, n_rows, exact, "recalibrated",
                                            "a " + _unit(grouped_by, grouping, src.get("file")),
                                            "rows" if groups is None else "positions" if grouped_by == "position"
                                            else f"{', '.join(grouping or ['label'])} groups",
                                            n_rows if n_groups is None else n_groups)}
    from models.scale import rescaled

    scale = rescaled((m.get("calibration") or {}).get("scale"), model, features, centers)
    if scale is not None:
        calibration["scale"] = scale
    training = {**(m.get("training") or {}), "recalibrated": {
        "parent_bundle_id": m.get("bundle_id"), "rows": n_rows, "groups": n_groups, "source": src,
        "parent_guarantee": stated_guarantee(parent),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
    return Recalibration(model, calibration, training, n_rows, n_groups, words, grouped_by, repeated)


def stated_guarantee(model: RegionModel) -> str:
    """The guarantee a model's manifest states.

    Parameters
    ----------
    model : RegionModel
        A loaded model.

    Returns
    -------
    str
        The manifest's words, or for a bundle that states none, those its served method's calibration gives
        (:func:`~models.calibration.conformal.guarantee_words`).
    """
    stated = (model.manifest.get("calibration") or {}).get("guarantee")
    if stated:
        return stated
    cal = model.methods[model.primary_method].calibrator_
    grouped = cal.rule != "rows"
    return guarantee_words(model.coverage, cal.rule, "row of a new group" if grouped else
                           "new row exchangeable with the calibration rows", int(cal.n_rows_),
                           int(cal.n_calibration_) if grouped else None, on="calibration")


def _unit(grouped_by: str, grouping: list[str] | None, file: str | None) -> str:
    """What the recalibrated guarantee is for, in words."""
    like = f"those of {file}" if file else "the fresh ones"
    if grouped_by == "position":
        return f"reading at a new position, a position drawn like {like}"
    if grouped_by == "labels":
        return f"row of a new {', '.join(grouping) if grouping else 'group'} group, a group drawn like {like}"
    return f"new row drawn like {'the rows of ' + file if file else 'the fresh rows'}"


def threshold_changes(parent: RegionModel, model: RegionModel) -> dict[str, tuple[float, float]]:
    """How each method's threshold moved.

    Parameters
    ----------
    parent : RegionModel
        The model before.
    model : RegionModel
        The model after.

    Returns
    -------
    dict of str -> (float, float)
        ``method -> (old alpha_q, new alpha_q)``.
    """
    return {name: (float(parent.methods[name].alpha_q_), float(reg.alpha_q_)) for name, reg in model.methods.items()
            if name in parent.methods and np.ndim(reg.alpha_q_) == 0}
