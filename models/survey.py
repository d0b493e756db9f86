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

    @classmethod
    def of(cls, positions, floors, example_features, example_points, example_floors, *,
           seed: int = 0) -> "Survey":
        """The survey of surveyed rows' ``positions`` (m, n) and ``floors`` (m,) codes or ``None``, and up
        to :data:`EXAMPLES` example rows drawn (seeded) from the held-out ones given."""
        positions = np.asarray(positions, dtype=np.float64)
        keys = positions if floors is None else np.column_stack([positions, np.asarray(floors, dtype=np.float64)])
        unique, counts = np.unique(keys, axis=0, return_counts=True)
        rng = np.random.default_rng(seed)
        if len(unique) > MAX_POSITIONS:
            keep = np.sort(rng.choice(len(unique), MAX_POSITIONS, replace=False))
            unique, counts = unique[keep], counts[keep]
        n = positions.shape[1]
        pick = np.sort(rng.choice(len(example_points), min(EXAMPLES, len(example_points)), replace=False))
        return cls(positions=unique[:, :n], counts=counts.astype(np.int64),
                   floors=None if floors is None else unique[:, n].astype(np.int64),
                   example_features=np.asarray(example_features, dtype=np.float64)[pick],
                   example_points=np.asarray(example_points, dtype=np.float64)[pick],
                   example_floors=None if example_floors is None else np.asarray(example_floors, dtype=np.int64)[pick])

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {"positions": self.positions, "counts": self.counts, "example_features": self.example_features,
                  "example_points": self.example_points}
        if self.floors is not None:
            arrays["floors"] = self.floors
        if self.example_floors is not None:
            arrays["example_floors"] = self.example_floors
        return {"positions": int(len(self.positions)), "rows": int(self.counts.sum()),
                "examples": int(len(self.example_points))}, arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], d: int, n: int, path: str = "survey.npz") -> "Survey":
        try:
            survey = cls(positions=arrays["positions"], counts=arrays["counts"], floors=arrays.get("floors"),
                         example_features=arrays["example_features"], example_points=arrays["example_points"],
                         example_floors=arrays.get("example_floors"))
        except KeyError as exc:
            raise BundleError(f"{path} lacks the array {exc}", path=path) from None
        k, m = len(survey.positions), len(survey.example_points)
        if (survey.positions.shape != (k, n) or survey.counts.shape != (k,) or survey.example_points.shape != (m, n)
                or survey.example_features.shape != (m, d)
                or (survey.floors is not None and survey.floors.shape != (k,))
                or (survey.example_floors is not None and survey.example_floors.shape != (m,))):
            raise BundleError(f"{path}: its arrays do not fit the bundle (d = {d}, n = {n})", path=path)
        return survey
