"""UJIIndoorLoc's floors: the joint floor set and ellipse against the Bonferroni baseline and the 2-D bundle.

    python -m benchmarks.floors --seeds 0-9

Per protocol and seed, ``training.pipeline.train`` as ``lmve-train --dataset indoor_localization
--floor-column FLOOR --building-column BUILDINGID --methods ge,nle --centre knn --floor-classifier auto``
runs it: ``random`` is the paper's row split (``--groups none``: calibration and test rows drawn at
random), ``leave-location-out`` the default grouped protocol (whole surveyed positions in calibration
and test; the guarantee is per new position). On the same split, per method:

- ``joint``: the bundle's answer, the floor set with the ellipse of the joint threshold (``models.floors``);
- ``bonferroni``: the floor set and the ellipse each calibrated alone at ``1 - (1 - eta) / 2`` on the same
  calibration rows (``training.pipeline.floors.bonferroni``);
- ``2d``: the same bundle without its floor part, as ``lmve-train`` without ``--floor-column`` writes it
  (the floor stage runs after the ellipses and changes nothing else): its ellipse, no floor figures.

Each (protocol, seed) is cached as JSON under ``benchmarks/cache/floors/`` (a rerun resumes). Writes
``benchmarks/results/floors.{csv,md}``: csv columns ``protocol,method,n_splits,floor_hit_rate,
set_size_mean,joint_coverage_mean,area_mean`` (``method`` is ``joint/ge``, ``bonferroni/ge``, ``2d/ge``, ...;
the 2-D rows' floor columns empty; ``joint_coverage_mean`` of a 2-D row is its position coverage; area in m^2)
and a table with the spread over splits, the position and floor coverages and the region (set size x area).
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import statistics
import sys
import time

import numpy as np

from benchmarks.common import M2_PER_KM2, RESULTS, cache_dir, commit, parse_seeds, write_json


CACHE = cache_dir("floors")
COMMAND = "python -m benchmarks.floors"
PROTOCOLS = ("random", "leave-location-out")
COLUMNS = ("protocol", "method", "n_splits", "floor_hit_rate", "set_size_mean", "joint_coverage_mean", "area_mean")




def dataset(protocol: str):
    from training.data.datasets import group_by_position, load_dataset

    ds = load_dataset("indoor_localization")
    return ds if protocol == "random" else group_by_position(ds)


def run_split(ds, protocol: str, seed: int, methods: tuple[str, ...], classifier: str) -> dict:
    """One split: train the floor bundle, then the joint, Bonferroni and 2-D figures of each method on its test part."""
    from training.pipeline.floors import bonferroni, bonferroni_sets, floor_labels, floor_metrics
    from training.pipeline import TrainConfig, train

    t0 = time.perf_counter()
    config = TrainConfig(seed=seed, methods=methods, fallbacks=False, centre="knn", floor_column="FLOOR",
                         building_column="BUILDINGID", floor_classifier=classifier, use_groups=protocol != "random")
    result = train(ds, config)
    seconds = time.perf_counter() - t0
    model, split = result.model, result.split
    _, codes = floor_labels(ds, "FLOOR", "BUILDINGID")
    plain = copy.copy(model)
    plain.floors = None  # the 2-D bundle: the same ellipses' own calibration
    floors = model.floors
    X_cal, X_te, Y_te = ds.X[split.calibration], ds.X[split.test], ds.Y[split.test]
    P_cal, P_te = floors.proba(model._features(X_cal)), floors.proba(model._features(X_te))
    groups = getattr(ds, "groups", None)
    g_cal = None if groups is None or protocol == "random" else np.asarray(groups)[split.calibration]
    eta = model.coverage
    out = {}
    for name in floors.joint:
        out[f"joint/{name}"] = floors.metrics[name]
        q_floor, _ = bonferroni(floors, model.methods[name], P_cal, codes[split.calibration], eta, g_cal, seed)
        half = plain.predict_region(X_te, method=name, coverage=1.0 - (1.0 - eta) / 2.0).regions
        out[f"bonferroni/{name}"] = floor_metrics(bonferroni_sets(P_te, q_floor), P_te, codes[split.test],
                                                  half.contains(Y_te), half.volume("lebesgue"))
        own = plain.predict_region(X_te, method=name).regions
        out[f"2d/{name}"] = {"position_coverage": float(own.contains(Y_te).mean()),
                             "area_mean": float(own.volume("lebesgue").mean()), "n_test": int(len(Y_te))}
    return {"protocol": protocol, "seed": seed, "train_seconds": round(seconds, 1),
            "classifier": floors.classifier.name, "selection": floors.selection,
            "n_calibration": {k: floors.joint[k].calibrator.n_calibration_ for k in floors.joint},
            "rows": {"train": int(len(split.train)), "calibration": int(len(split.calibration)),
                     "test": int(len(split.test))}, "results": out}


def cached(protocol: str, seed: int, methods, classifier: str, ds_of) -> dict:
    path = CACHE / f"{protocol}-seed{seed}-{classifier}-{'+'.join(methods)}.json"
    if path.is_file():
        return json.loads(path.read_text())
    record = run_split(ds_of(protocol), protocol, seed, methods, classifier)
    write_json(path, record, indent=1)
    return record


def summarise(records: list[dict]) -> list[dict]:
    rows = []
    for protocol in PROTOCOLS:
        recs = [r for r in records if r["protocol"] == protocol]
        if not recs:
            continue
        for key in recs[0]["results"]:
            figures = [r["results"][key] for r in recs]

            def mean(field, scale=1.0):
                return statistics.fmean(f[field] * scale for f in figures)

            def sd(field, scale=1.0):
                return statistics.stdev(f[field] * scale for f in figures) if len(figures) > 1 else 0.0

            floor = not key.startswith("2d/")
            rows.append({"protocol": protocol, "method": key, "n_splits": len(figures),
                         "floor_hit_rate": mean("floor_hit_rate") if floor else None,
                         "set_size_mean": mean("set_size_mean") if floor else None,
                         "joint_coverage_mean": mean("joint_coverage") if floor else mean("position_coverage"),
                         "area_mean": mean("area_mean", M2_PER_KM2),
                         "joint_coverage_sd": sd("joint_coverage") if floor else sd("position_coverage"),
                         "position_coverage_mean": mean("position_coverage"),
                         "floor_coverage_mean": mean("floor_coverage") if floor else None,
                         "region_mean": mean("region_mean", M2_PER_KM2) if floor else None,
                         "n_test_mean": mean("n_test")})
    return rows


def fmt(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def write(rows: list[dict], records: list[dict], args) -> None:
    command = f"{COMMAND} --seeds {args.seeds} --methods {args.methods} --floor-classifier {args.floor_classifier}"
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "floors.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([r["protocol"], r["method"], r["n_splits"], fmt(r["floor_hit_rate"], ".4f"),
                        fmt(r["set_size_mean"], ".4f"), fmt(r["joint_coverage_mean"], ".4f"), fmt(r["area_mean"], ".1f")])
    chosen = {}
    for r in records:
        params = r["selection"].get("params") or {}
        label = r["classifier"] + (f" ({', '.join(f'{k} {v}' for k, v in params.items())})" if params else "")
        chosen.setdefault(r["protocol"], {}).setdefault(label, 0)
        chosen[r["protocol"]][label] += 1
    cv = next((r["selection"].get("cv") for r in records if r["selection"].get("cv")), None)
    seconds = statistics.fmean(r["train_seconds"] for r in records)
    lines = ["# UJIIndoorLoc floors: one joint guarantee for the floor set and the ellipse", "",
             f"`{command}` at commit `{commit()}`: per split, `lmve-train --dataset indoor_localization "
             "--floor-column FLOOR --building-column BUILDINGID --centre knn` (13 building-floors); "
             "coverage 0.9. `random`: calibration and test rows at random (`--groups none`); "
             "`leave-location-out`: whole surveyed positions (the default protocol; the guarantee is per new "
             "position). Methods: `joint/M` the bundle's answer (floor set and the ellipse of the joint threshold), "
             "`bonferroni/M` each part calibrated alone at 0.95 on the same rows, `2d/M` the same bundle without "
             "floors (its own ellipse; position coverage in the coverage column).", "",
             "| protocol | method | splits | floor hit rate | mean set size | joint coverage (sd) | position cov. "
             "| floor cov. | area (m^2) | set size x area (m^2) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['protocol']} | `{r['method']}` | {r['n_splits']} | {fmt(r['floor_hit_rate'], '.1%')} | "
                     f"{fmt(r['set_size_mean'], '.3f')} | {r['joint_coverage_mean']:.1%} ({100 * r['joint_coverage_sd']:.1f}) | "
                     f"{r['position_coverage_mean']:.1%} | {fmt(r['floor_coverage_mean'], '.1%')} | "
                     f"{r['area_mean']:.0f} | {fmt(r['region_mean'], '.0f')} |")
    lines += ["", f"Floor classifier (`--floor-classifier {args.floor_classifier}`), splits per choice: "
              + "; ".join(f"{p}: " + ", ".join(f"{k} x{n}" for k, n in sorted(c.items())) for p, c in chosen.items())
              + ("; cross-validated Brier scores of the candidates on the first split: "
                 + ", ".join(f"{k} {v['brier']:.4f}" + (f" ({', '.join(f'{p} {b:.4f}' for p, b in v['grid'].items())})"
                                                         if "grid" in v else "") for k, v in cv.items())
                 if cv else "") + ".",
              f"Training a floor bundle: {seconds:.1f} s per split (2 cores), cached runs included as recorded.",
              "Test rows per split: " + ", ".join(f"{p} {statistics.fmean(r['rows']['test'] for r in records if r['protocol'] == p):.0f}"
                                                  for p in PROTOCOLS if any(r['protocol'] == p for r in records)) + "."]
    (RESULTS / "floors.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-9", help="seeds per protocol, e.g. 0-9 (default)")
    parser.add_argument("--methods", default="ge,nle", help="ellipsoid methods (default ge,nle)")
    parser.add_argument("--floor-classifier", default="auto", help="auto (default, as lmve-train) | knn | logistic")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    args = parser.parse_args(argv)
    methods = tuple(args.methods.split(","))
    loaded: dict = {}

    def ds_of(protocol):
        if protocol not in loaded:
            loaded[protocol] = dataset(protocol)
        return loaded[protocol]

    records = []
    for protocol in args.protocols.split(","):
        for seed in parse_seeds(args.seeds):
            rec = cached(protocol, seed, methods, args.floor_classifier, ds_of)
            records.append(rec)
            j = rec["results"][f"joint/{methods[0]}"]
            print(f"{protocol} seed {seed}: joint {j['joint_coverage']:.3f}, hit {j['floor_hit_rate']:.3f}, "
                  f"set {j['set_size_mean']:.2f}, {rec['train_seconds']} s", flush=True)
    rows = summarise(records)
    write(rows, records, args)
    print((RESULTS / "floors.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
