"""Which space a fingerprint centre should search at a new phone: every representation, cutoff and k, the
standard-scaled columns, and building or floor first, each unit of UJIIndoorLoc left out in turn.

    python -m benchmarks.fingerprint_space

Every row of UJIIndoorLoc's TrainingData gets its neighbours among the rows of the other phones (or users),
by :func:`models.centres.fingerprint.leave_out_neighbours`, in each space:

- the readings (not heard at the RSSI step's floor) in each of ``dbm``, ``exponential``, ``powed``,
  ``relative`` (:func:`models.centres.representations.represent`), with cutoffs 0, 4 and 9 dB above the weakest
  reading for ``dbm``;
- ``standardised``: the RSSI step's dBm columns standard-scaled, what the k-NN centre searches;
- ``gated``: the best readings space, the building (or building and floor) voted by the 3 nearest neighbours
  first, then the ``k`` nearest within it.

Per space and ``k`` (inverse-distance weights): the mean over held-out units of each unit's RMSE, the pooled
p90 and share over 50 m of the errors (m), and the textbook circle on that centre (the 90 % quantile of the
other units' errors, each weighing the same): mean coverage over units, the worst unit's, the mean area.
Writes ``benchmarks/results/fingerprint_space.{csv,md}``.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import M_PER_KM, RESULTS, command, commit, write_rows, write_text

COLUMNS = ["protocol", "space", "k", "rmse", "p90", "over_50m", "coverage", "worst", "area"]
K = 11


def unit_quantile(e: np.ndarray, units: np.ndarray, q: float = 0.9) -> float:
    _, inverse, counts = np.unique(units, return_inverse=True, return_counts=True)
    w = 1.0 / counts[inverse]
    order = np.argsort(e, kind="stable")
    return float(e[order][min(int(np.searchsorted(np.cumsum(w[order]) / w.sum(), q)), len(e) - 1)])


def weighted(near, dist, Y, k):
    w = 1.0 / np.maximum(dist[:, :k], 1e-9)
    w[~np.isfinite(dist[:, :k])] = 0.0
    return np.einsum("mk,mkn->mn", w / w.sum(axis=1, keepdims=True), Y[near[:, :k]])


def figures(e: np.ndarray, units: np.ndarray) -> dict:
    """The row's figures of errors ``e`` (m) at held-out ``units``."""
    cov, area, rmse = [], [], []
    for u in np.unique(units):
        mine = units == u
        r = unit_quantile(e[~mine], units[~mine])
        cov.append((e[mine] <= r).mean())
        area.append(np.pi * r * r)
        rmse.append(np.sqrt(np.mean(e[mine] ** 2)))
    return {"rmse": float(np.mean(rmse)), "p90": float(np.percentile(e, 90)), "over_50m": float((e > 50).mean()),
            "coverage": float(np.mean(cov)), "worst": float(np.min(cov)), "area": float(np.mean(area))}


def gated(F, codes, labels, near, dist, Y, k):
    """Building (or floor) voted by the 3 nearest, then the ``k`` nearest of other units within it."""
    w = 1.0 / np.maximum(dist[:, :3], 1e-9)
    values = np.unique(labels)
    votes = np.stack([(w * (labels[near[:, :3]] == v)).sum(axis=1) for v in values], axis=1)
    chosen = values[votes.argmax(axis=1)]
    P = np.empty_like(Y)
    for v in values:
        rows = np.flatnonzero(chosen == v)
        if len(rows):
            P[rows] = weighted(*within(F, codes, labels == v, rows), Y, k)
    return P


def within(F, codes, inside, rows):
    """The ``K`` nearest rows of other units among the rows ``inside``, for the query ``rows``."""
    sub = np.flatnonzero(inside)
    G = np.ascontiguousarray(F[sub], dtype=np.float32)
    norms = np.einsum("ij,ij->i", G, G)
    near, dist = np.empty((len(rows), K), dtype=np.intp), np.empty((len(rows), K))
    for start in range(0, len(rows), 512):
        at = rows[start:start + 512]
        q = np.ascontiguousarray(F[at], dtype=np.float32)
        D = norms[None, :] - 2.0 * q @ G.T + np.einsum("ij,ij->i", q, q)[:, None]
        D[codes[at, None] == codes[sub][None, :]] = np.inf
        part = np.argpartition(D, K - 1, axis=1)[:, :K]
        d = np.take_along_axis(D, part, axis=1)
        order = np.argsort(d, axis=1)
        near[start:start + 512] = sub[np.take_along_axis(part, order, axis=1)]
        dist[start:start + 512] = np.sqrt(np.maximum(np.take_along_axis(d, order, axis=1), 0.0))
    return near, dist


def main() -> int:
    from sklearn.preprocessing import StandardScaler

    from models.centres.fingerprint import leave_out_neighbours
    from models.centres.representations import represent
    from models.preprocessing import RSSIFloor
    from training.data.datasets import load_dataset

    ds = load_dataset("indoor_localization")
    step = RSSIFloor().fit(ds.X)
    R = step.transform(ds.X)
    Y = ds.Y * M_PER_KM
    spaces = {f"{rep}{'' if not cut else f' cutoff {cut:g} dB'}":
              represent(R, rep, step.floor_ + (0 if not cut else step.weakest_ - step.floor_ + cut), step.floor_,
                        step.reference_)
              for rep, cut in [("dbm", 0), ("dbm", 4), ("dbm", 9), ("exponential", 0), ("powed", 0),
                               ("relative", 0)]}
    spaces["standardised"] = StandardScaler().fit_transform(R)
    meta = {name: np.asarray(v) for name, v in ds.meta.items()}
    rows = []
    for protocol, column in (("phone", "PHONEID"), ("user", "USERID")):
        codes = np.unique(meta[column], return_inverse=True)[1].ravel()
        best = None
        for name, F in spaces.items():
            near, dist = leave_out_neighbours(F, codes, K)
            for k in (1, 3, 5, 7, 11):
                e = np.linalg.norm(weighted(near, dist, Y, k) - Y, axis=1)
                rows.append({"protocol": protocol, "space": name, "k": k, **figures(e, meta[column])})
                if name != "standardised" and (best is None or rows[-1]["rmse"] < best[0]):
                    best = (rows[-1]["rmse"], name, k)
            print(protocol, name, flush=True)
        _, name, k = best
        F = spaces[name]
        near, dist = leave_out_neighbours(F, codes, K)
        for gate, labels in (("building", meta["BUILDINGID"]), ("floor", meta["BUILDINGID"] * 100 + meta["FLOOR"])):
            e = np.linalg.norm(gated(F, codes, labels, near, dist, Y, k) - Y, axis=1)
            rows.append({"protocol": protocol, "space": f"{name}, {gate} first", "k": k, **figures(e, meta[column])})
    write_rows(RESULTS / "fingerprint_space.csv", rows, COLUMNS)
    lines = ["# The fingerprint centre's space at a new phone", "",
             f"Command: `{command('fingerprint_space', [])}` at commit {commit()}. UJIIndoorLoc TrainingData, every "
             "row's neighbours among the other units' rows (inverse-distance weights); RMSE: the mean of the "
             "held-out units' RMSE (m); p90 and over 50 m: pooled errors; the circle: radius the 90 % quantile of "
             "the other units' errors, each unit weighing the same: mean coverage over units, the worst unit's, "
             "mean area (m^2).", "",
             "| protocol | space | k | RMSE m | p90 m | over 50 m % | coverage % | worst % | area m^2 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['protocol']} | {r['space']} | {r['k']} | {r['rmse']:.1f} | {r['p90']:.1f} | "
                     f"{100 * r['over_50m']:.1f} | {100 * r['coverage']:.1f} | {100 * r['worst']:.1f} | "
                     f"{r['area']:,.0f} |")
    write_text(RESULTS / "fingerprint_space.md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
