"""What a bundle keeps of its survey for people to look at (``GET /viewer``): where the rows were
taken, and a few held-out rows to ask the service about.

``lmve-train`` stores it as ``survey.npz``: the distinct surveyed positions of the training and
calibration rows (with a floor bundle, distinct (position, floor class) pairs) and how many rows
each holds, and up to :data:`EXAMPLES` rows of the test part (raw features, true position and floor
class), never used to fit or calibrate, so the ellipse the viewer draws for one is a fair draw.
Nothing here changes an answer: a bundle without it serves exactly the same regions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.exceptions import BundleError

#: held-out rows kept for the viewer to pick from
EXAMPLES = 100
#: distinct positions kept at most (a random subset beyond: the viewer's drawing stays light)
MAX_POSITIONS = 20_000


@dataclass(frozen=True)
class Survey:
    """``positions`` (k, n) distinct surveyed positions (target units), ``counts`` (k,) rows at each,
    ``floors`` (k,) their floor class codes (a floor bundle) or ``None``; ``example_features`` (m, d),
    ``example_points`` (m, n) and ``example_floors`` (m,) or ``None``: held-out rows."""

    positions: np.ndarray
    counts: np.ndarray
    floors: np.ndarray | None
    example_features: np.ndarray
    example_points: np.ndarray
    example_floors: np.ndarray | None
    areas: np.ndarray | None = None
    """(k,) the served method's mean region area over each position's readings (target units squared; NaN
    where none was predicted); ``None`` in a bundle from before the survey map."""
    errors: np.ndarray | None = None
    """(k,) the centre's root-mean-square error at each position from a centre that never saw it (target
    units; NaN where none did); ``None`` in a bundle from before the survey map."""

    @classmethod
    def of(cls, positions, floors, example_features, example_points, example_floors, *,
           areas=None, errors=None, seed: int = 0) -> "Survey":
        """The survey of surveyed rows' ``positions`` (m, n) and ``floors`` (m,) codes or ``None``, and up
        to :data:`EXAMPLES` example rows drawn (seeded) from the held-out ones given. ``areas`` and
        ``errors`` (m,), NaN where a row has none: each row's served region area and its honest centre
        error, averaged per position (the errors' root mean square)."""
        positions = np.asarray(positions, dtype=np.float64)
        keys = positions if floors is None else np.column_stack([positions, np.asarray(floors, dtype=np.float64)])
        unique, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        per = {"areas": None if areas is None else _per_position(areas, inverse, len(unique)),
               "errors": None if errors is None else np.sqrt(_per_position(np.square(errors), inverse, len(unique)))}
        rng = np.random.default_rng(seed)
        if len(unique) > MAX_POSITIONS:
            keep = np.sort(rng.choice(len(unique), MAX_POSITIONS, replace=False))
            unique, counts = unique[keep], counts[keep]
            per = {k: None if v is None else v[keep] for k, v in per.items()}
        n = positions.shape[1]
        pick = np.sort(rng.choice(len(example_points), min(EXAMPLES, len(example_points)), replace=False))
        return cls(positions=unique[:, :n], counts=counts.astype(np.int64),
                   floors=None if floors is None else unique[:, n].astype(np.int64),
                   example_features=np.asarray(example_features, dtype=np.float64)[pick],
                   example_points=np.asarray(example_points, dtype=np.float64)[pick],
                   example_floors=None if example_floors is None else np.asarray(example_floors, dtype=np.int64)[pick],
                   **per)

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {"positions": self.positions, "counts": self.counts, "example_features": self.example_features,
                  "example_points": self.example_points}
        if self.floors is not None:
            arrays["floors"] = self.floors
        if self.example_floors is not None:
            arrays["example_floors"] = self.example_floors
        for name in ("areas", "errors"):
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        return {"positions": int(len(self.positions)), "rows": int(self.counts.sum()),
                "examples": int(len(self.example_points))}, arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], d: int, n: int, path: str = "survey.npz") -> "Survey":
        try:
            survey = cls(positions=arrays["positions"], counts=arrays["counts"], floors=arrays.get("floors"),
                         example_features=arrays["example_features"], example_points=arrays["example_points"],
                         example_floors=arrays.get("example_floors"), areas=arrays.get("areas"),
                         errors=arrays.get("errors"))
        except KeyError as exc:
            raise BundleError(f"{path} lacks the array {exc}", path=path) from None
        k, m = len(survey.positions), len(survey.example_points)
        if (survey.positions.shape != (k, n) or survey.counts.shape != (k,) or survey.example_points.shape != (m, n)
                or survey.example_features.shape != (m, d)
                or (survey.floors is not None and survey.floors.shape != (k,))
                or (survey.example_floors is not None and survey.example_floors.shape != (m,))
                or any(a is not None and a.shape != (k,) for a in (survey.areas, survey.errors))):
            raise BundleError(f"{path}: its arrays do not fit the bundle (d = {d}, n = {n})", path=path)
        return survey


def _per_position(values, inverse: np.ndarray, k: int) -> np.ndarray:
    """(k,) the mean of each position's finite ``values`` (rows mapped to positions by ``inverse``); NaN where none."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = np.isfinite(values)
    total = np.bincount(inverse[finite], weights=values[finite], minlength=k)
    count = np.bincount(inverse[finite], minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
