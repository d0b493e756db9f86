"""At a new phone: `lmve-train --calibrate-across` on every phone but one (and every user but one) against the
textbook weighted 3-NN with a circle calibrated leave-one-phone-out, on the held-out unit's rows.

    python -m benchmarks.new_phone                        # both protocols, every unit (resumes from the cache)
    python -m benchmarks.new_phone --protocols phone --units 17,19
    python -m benchmarks.new_phone --cached-only          # summarise what ran

The page always reports every cached unit: a run of one protocol keeps the other's cached rows.

UJIIndoorLoc TrainingData. For each held-out unit (a PHONEID, or a USERID), on the rows of every other unit:

- ``served``: what ``lmve-train --dataset indoor_localization --calibrate-across PHONEID`` (USERID) trains and
  serves (the CLI's configuration and its grouping by position, :func:`training.data.datasets.survey_groups`), asked
  for the held-out unit's rows: the served method's regions; ``ball``: the ball about the same centre from the
  same bundle, calibrated the same way (the served region should never be larger);
- ``textbook``: weighted 3-NN (inverse distance, every reference row, Torres-Sospedra et al.'s exponential
  representation, not heard = -105 dBm) and a circle whose radius is the 90 % quantile of the other units'
  leave-one-unit-out errors (each unit weighing the same; the held-out unit in no reference set).

Columns: ``protocol, held_out, method, coverage`` (of the held-out unit's rows), ``area`` (mean region area,
m^2), ``centre_rmse``, ``centre_median`` (m), then the served method, the centre and its configuration, rows,
seconds and commit. Each unit's run is cached under ``benchmarks/cache/new_phone/``. Writes
``benchmarks/results/new_phone.{csv,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks.common import M2_PER_KM2, M_PER_KM, RESULTS, cache_dir, command, commit, write_rows, write_text

CACHE = cache_dir("new_phone")
PROTOCOLS = {"phone": "PHONEID", "user": "USERID"}
COLUMNS = ["protocol", "held_out", "method", "coverage", "area", "centre_rmse", "centre_median", "served_method",
           "centre", "configuration", "n_rows", "seconds", "commit"]
LEVEL = 0.9
#: the textbook's constants: not heard (dBm), the exponential's alpha (dB), neighbours
NOT_HEARD, ALPHA, K = -105.0, 24.0, 3


# ---------------------------------------------------------------------------------------------- the textbook peer
def textbook_features(X: np.ndarray) -> np.ndarray:
    """Torres-Sospedra et al.'s exponential representation of UJIIndoorLoc readings (+100: not heard)."""
    R = np.where(X == 100, NOT_HEARD, X)
    return (np.exp((R - NOT_HEARD) / ALPHA) / np.exp(-NOT_HEARD / ALPHA)).astype(np.float32)


def textbook_centres(F: np.ndarray, Y: np.ndarray, query: np.ndarray, allowed) -> np.ndarray:
    """Weighted 3-NN centres of the rows ``query``, each from the reference rows ``allowed(rows)`` admits
    ((q, m) mask), inverse-distance weights (an exact match alone)."""
    norms = np.einsum("ij,ij->i", F, F)
    out = np.empty((len(query), Y.shape[1]))
    for s in range(0, len(query), 1024):
        rows = query[s:s + 1024]
        D = norms[None, :] - 2.0 * F[rows] @ F.T + norms[rows, None]
        D[np.broadcast_to(~allowed(rows), D.shape)] = np.inf
        idx = np.argpartition(D, K, axis=1)[:, :K]
        d = np.sqrt(np.maximum(np.take_along_axis(D, idx, axis=1), 0.0)).astype(np.float64)
        w = np.where((d == 0).any(axis=1, keepdims=True), (d == 0).astype(float), 1.0 / np.maximum(d, 1e-12))
        out[s:s + 1024] = np.einsum("qk,qkn->qn", w / w.sum(axis=1, keepdims=True), Y[idx])
    return out


def unit_weighted_quantile(e: np.ndarray, units: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``e`` with every unit weighing the same."""
    _, inverse, counts = np.unique(units, return_inverse=True, return_counts=True)
    w = 1.0 / counts[inverse]
    order = np.argsort(e, kind="stable")
    return float(e[order][min(int(np.searchsorted(np.cumsum(w[order]) / w.sum(), q)), len(e) - 1)])


def textbook(F: np.ndarray, Y: np.ndarray, units: np.ndarray, held: int) -> dict:
    """The textbook peer at the held-out unit ``held``: centres from every other unit's rows, the circle's
    radius from the other units' leave-one-unit-out errors (``held`` never a reference)."""
    test, rest = np.flatnonzero(units == held), np.flatnonzero(units != held)
    centres = textbook_centres(F, Y, test, lambda rows: (units != held)[None, :])
    own = textbook_centres(F, Y, rest, lambda rows: (units[None, :] != units[rows, None]) & (units != held)[None, :])
    radius = unit_weighted_quantile(np.linalg.norm(own - Y[rest], axis=1), units[rest], LEVEL)
    e = np.linalg.norm(centres - Y[test], axis=1)
    return {"method": "textbook", "coverage": float((e <= radius).mean()), "area": float(np.pi * radius ** 2),
            "errors": e, "served_method": "circle", "centre": "wknn-3 exponential", "configuration": ""}


# ---------------------------------------------------------------------------------------------- the product
def served(ds, column: str, held: int) -> tuple[list[dict], dict]:
    """``lmve-train --calibrate-across COLUMN`` on the rows of every unit but ``held``, asked for ``held``'s rows:
    the served regions and the ball about the same centre."""
    from dataclasses import replace

    from training.commands.train_args import build_parser, config_from_args
    from training.data.datasets import group_by_position
    from training.pipeline import train

    args = build_parser("").parse_args(["--dataset", "indoor_localization", "--calibrate-across", column, "--quiet"])
    config = config_from_args(args)
    units = np.asarray(ds.meta[column])
    keep, test = np.flatnonzero(units != held), np.flatnonzero(units == held)
    rest = replace(ds, X=ds.X[keep], Y=ds.Y[keep], meta={k: np.asarray(v)[keep] for k, v in ds.meta.items()})
    rest = group_by_position(rest, auto=True)  # as lmve-train groups a survey (load_data)
    t0 = time.perf_counter()
    result = train(rest, config)
    seconds = time.perf_counter() - t0
    model = result.model
    info = result.centre
    chosen = (info.get("fingerprint") or {}).get("chosen")
    configuration = "" if chosen is None or info["name"] != "fingerprint" else \
        f"{chosen['representation']} cutoff {chosen['cutoff_db']:g} dB, k={chosen['n_neighbors']}, {chosen['weights']}"
    rows = []
    for label, method in (("served", model.primary_method), ("ball", "ball")):
        regions = model.predict_region(ds.X[test], method=method, typicality=False).regions
        e = np.linalg.norm(regions.centers - ds.Y[test], axis=1) * M_PER_KM
        rows.append({"method": label,
                     "coverage": float(regions.contains(ds.Y[test]).mean()),
                     "area": float(regions.volume("lebesgue").mean()) * M2_PER_KM2, "errors": e,
                     "served_method": method, "centre": info["name"], "configuration": configuration,
                     "seconds": seconds})
    return rows, {"centre": {k: v for k, v in info.items() if k != "cv"}, "selection": model.selection.get("primary"),
                  "guarantee": (result.split.across or {}).get("guarantee")}


def run_unit(ds, F: np.ndarray, protocol: str, held: int) -> dict:
    """One held-out unit: the product and the textbook (cached)."""
    path = CACHE / f"{protocol}_{held}.json"
    if path.is_file():
        return json.loads(path.read_text())
    column = PROTOCOLS[protocol]
    units = np.asarray(ds.meta[column])
    part = CACHE / f"{protocol}_{held}_served.json"  # the training is the dear part: kept on its own
    if part.is_file():
        rows, extra = json.loads(part.read_text())
        for r in rows:
            r["errors"] = np.asarray(r["errors"])
    else:
        rows, extra = served(ds, column, held)
        write_text(part, json.dumps([rows, extra], default=lambda v: v.tolist() if isinstance(v, np.ndarray)
                                    else float(v)))
    t0 = time.perf_counter()
    peer = textbook(F, ds.Y * M_PER_KM, units, held)
    peer["seconds"] = time.perf_counter() - t0
    out = []
    for r in [*rows, peer]:
        e = r.pop("errors")
        out.append({"protocol": protocol, "held_out": int(held), **r, "centre_rmse": float(np.sqrt(np.mean(e ** 2))),
                    "centre_median": float(np.median(e)), "n_rows": int((units == held).sum())})
    record = {"protocol": protocol, "held_out": int(held), "commit": commit(), "rows": out, **extra}
    write_text(path, json.dumps(record, indent=1, default=float))
    return record


# ---------------------------------------------------------------------------------------------- the report
def summarise(records: list[dict], argv: list[str]) -> tuple[list[dict], str]:
    """The csv rows and the markdown page: per protocol the means over held-out units and the worst unit."""
    import pandas as pd

    rows = [{**r, "commit": rec["commit"]} for rec in records for r in rec["rows"]]
    df = pd.DataFrame(rows)
    lines = ["# At a new phone: lmve against the textbook k-NN circle", "",
             f"Command: `{command('new_phone', argv)}` at commit {commit()}; runs at "
             f"{', '.join(sorted({c[:7] for c in df['commit']}))}. UJIIndoorLoc TrainingData (19,937 rows); each "
             "unit held out in turn, the models trained on every other unit's rows. `served`: `lmve-train "
             "--calibrate-across PHONEID` (USERID) as the CLI runs it, its served regions; `ball`: the ball about the "
             "same centre in the same bundle; `textbook`: weighted 3-NN on exponential readings with a circle "
             "calibrated leave-one-unit-out. Coverage of the held-out unit's rows at 0.9, mean region area (m^2), the "
             "centre's RMSE and median error on them (m): means over the held-out units.", "",
             "| protocol | method | units | coverage % | worst unit % | area m^2 | x textbook | centre RMSE m | "
             "median m |", "|---|---|---|---|---|---|---|---|---|"]
    for protocol in PROTOCOLS:
        sub = df[df.protocol == protocol]
        if sub.empty:
            continue
        ref = sub[sub.method == "textbook"].set_index("held_out")
        for method in ("served", "ball", "textbook"):
            part = sub[sub.method == method].set_index("held_out")
            if part.empty:
                continue
            worst = part.coverage.idxmin()
            ratio = part.area.mean() / ref.area.loc[part.index].mean()
            lines.append(f"| {protocol} | {method} | {len(part)} | {100 * part.coverage.mean():.1f} | "
                         f"{100 * part.coverage.min():.1f} ({protocol} {worst}) | {part.area.mean():,.0f} | {ratio:.2f} | "
                         f"{part.centre_rmse.mean():.1f} | {part.centre_median.mean():.1f} |")
    lines += ["", "Per held-out unit (served method; the fingerprint centre's configuration):", "",
              "| protocol | unit | rows | served | coverage % | area m^2 | textbook coverage % | textbook area m^2 | "
              "RMSE m | textbook RMSE m | centre |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (protocol, held), part in df.groupby(["protocol", "held_out"], sort=True):
        s = part[part.method == "served"].iloc[0]
        t = part[part.method == "textbook"].iloc[0]
        lines.append(f"| {protocol} | {held} | {s.n_rows} | {s.served_method} | {100 * s.coverage:.1f} | "
                     f"{s.area:,.0f} | {100 * t.coverage:.1f} | {t.area:,.0f} | {s.centre_rmse:.1f} | "
                     f"{t.centre_rmse:.1f} | {s.centre} {s.configuration} |")
    lines += ["", "Targets: the served centre's RMSE at most the textbook's (moonshot 20 m); the served area at most "
              "0.7x the textbook circle's (moonshot 0.5x) with mean coverage >= 88 % and no unit below the "
              "textbook's worst; the same for users."]
    return rows, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.new_phone", description=__doc__.split("\n\n")[0])
    p.add_argument("--protocols", default="phone,user", help="phone, user, or both (default)")
    p.add_argument("--units", default=None, help="comma-separated held-out units (default: every unit)")
    p.add_argument("--cached-only", action="store_true", help="summarise the cached runs, run nothing")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    from tqdm.auto import tqdm

    from training.data.datasets import load_dataset

    ds = load_dataset("indoor_localization")
    F = textbook_features(ds.X)
    asked = [x.strip() for x in args.protocols.split(",") if x.strip()]
    for protocol in asked:
        if protocol not in PROTOCOLS:
            p.error(f"--protocols: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    records = []
    for protocol in PROTOCOLS:  # the protocols not asked for report what their cache holds: a page with every unit
        units = np.unique(ds.meta[PROTOCOLS[protocol]])
        if args.units and protocol in asked:
            units = [u for u in units if str(u) in args.units.split(",")]
        run = protocol in asked and not args.cached_only
        for held in tqdm(units, desc=protocol, disable=not run):
            path = CACHE / f"{protocol}_{held}.json"
            if run:
                records.append(run_unit(ds, F, protocol, int(held)))
            elif path.is_file():
                records.append(json.loads(path.read_text()))
    if not records:
        print("new_phone: nothing cached yet", file=sys.stderr)
        return 1
    rows, text = summarise(records, argv)
    write_rows(RESULTS / "new_phone.csv", rows, COLUMNS)
    write_text(RESULTS / "new_phone.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
