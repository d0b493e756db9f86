"""One loaded data set: features, targets, their names, the source's hash and the per-row columns kept beside."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class Dataset:
    """Features ``X`` (m, d) and targets ``Y`` (m, n), their names and the source's hash.

    ``groups`` (m,), when set, labels the rows' groups (a surveyed position, a patient, a device):
    the grouped protocol then splits and calibrates over whole groups. ``grouping`` says how they
    were formed; ``meta`` holds other per-row columns kept for shift protocols (never features).
    """

    name: str
    X: np.ndarray
    Y: np.ndarray
    feature_names: list[str]
    target_names: list[str]
    sha256: str
    groups: np.ndarray | None = None
    grouping: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    #: (m, n) the client's own position estimate per row (``--centre-columns``), or None
    centers: np.ndarray | None = None
    centre_columns: list[str] = field(default_factory=list)
    #: columns of the source left out of the features without --features, each with why
    #: (:func:`training.data.columns.infer_features`); they are kept in ``meta``
    left_out: dict = field(default_factory=dict)
    #: the CRS the targets are in, as the source declares it (:func:`models.geo.parse_crs`'s ``default``:
    #: ``crs``, ``axes``, ``scale``), or None; ``lmve-train --crs`` overrides it
    crs: dict | None = None

    @property
    def info(self) -> dict:
        info = {"name": self.name, "sha256": self.sha256, "rows": int(self.X.shape[0]),
                "d": int(self.X.shape[1]), "n": int(self.Y.shape[1])}
        if self.groups is not None:
            info["grouping"] = self.grouping
        if self.left_out:
            info["left_out"] = dict(self.left_out)
        return info


def subset(ds: Dataset, rows: np.ndarray, name: str | None = None) -> Dataset:
    """The rows ``rows`` (a boolean mask or indices) of ``ds``: features, targets, groups, labels and
    estimates alike; the grouping's count of groups is recounted."""
    rows = np.asarray(rows)
    groups = None if ds.groups is None else ds.groups[rows]
    grouping = dict(ds.grouping)
    if groups is not None and "n_groups" in grouping:
        grouping["n_groups"] = int(len(np.unique(groups)))
    return replace(ds, name=name or ds.name, X=ds.X[rows], Y=ds.Y[rows], groups=groups, grouping=grouping,
                   meta={k: np.asarray(v)[rows] for k, v in ds.meta.items()},
                   centers=None if ds.centers is None else ds.centers[rows])


