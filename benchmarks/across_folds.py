"""How `--calibrate-across` folds its units, and which RSSI representation, at new UJIIndoorLoc phones and users
(issue 70): many splits with a cheap model, so the splits' noise is small beside the effects.

    python -m benchmarks.across_folds --seeds 0-19          # about 25 minutes on 2 cores
    python -m benchmarks.across_folds --cached-only         # summarise what ran

The product's splits (``training.calibration.across.across_split`` over PHONEID or USERID, as ``shift_product.py``), with
the k-NN centre and GE and NLE (seconds a split; the product's LMVE and centre choice cost minutes, which
``shift_product.py`` pays on fewer splits). Variants of ``training.pipeline.train`` on the same split:

- ``centre-5``: ``--calibrate-across``, the centre's unit folds 5 (``across_centre_folds=5``, before issue 70);
- ``across``: the default, one unit per centre fold (up to 20), the shapes' 5 folds;
- ``across-all``: one unit per fold for the shapes too (``cross_fit`` = the train part's units);
- ``position``: the defaults without ``--calibrate-across`` (grouped by position, dbm), same rows;
- ``position-relative``: the same with the relative representation.

Per split and method: coverage of the test rows at 0.9, the mean true area (m^2), and two oracles, which read
the test rows' labels (bounds, not products): ``oracle``, the area the same regions would need to hold exactly 90 %
of the test rows (their area times the test rows' 0.9 quantile of the scaled distance), and ``circle``, the
area of the circle about the same centre holding 90 % of them. The representation table: for each of
``models.preprocessing.REPRESENTATIONS``, the k-NN centre's RMSE over the train part's unit folds (what a
cross-validated choice reads) and on the test rows. Writes ``benchmarks/results/across_folds.{md,csv}``; runs are
cached per split under ``benchmarks/cache/across_folds/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (M2_PER_KM2, M_PER_KM, RESULTS, cache_dir, cached, command, commit, parse_seeds,
                               write_csv, write_text)
from benchmarks.harness.shift import ACROSS_PROTOCOLS as PROTOCOLS
from benchmarks.harness.shift import unit_coverage

CACHE = cache_dir("across_folds")
OUT = RESULTS
VARIANTS = ("centre-5", "across", "across-all", "position", "position-relative")
REPRESENTATIONS = ("dbm", "relative", "powed", "exponential")


def _config(variant: str, column: str, seed: int, n_train_units: int):
    from training.pipeline import TrainConfig

    kw = dict(coverage=0.9, seed=seed, centre="knn", rssi="auto", methods=("ge", "nle"), primary="ge",
              calibrate_across=(column,))
    if variant == "centre-5":
        kw["across_centre_folds"] = 5
    elif variant == "across-all":
        kw["cross_fit"] = n_train_units
    elif variant.startswith("position"):
        kw["calibrate_across"] = ()
        if variant == "position-relative":
            kw["rssi_representation"] = "relative"
    return TrainConfig(**kw)


def run_variant(ds, protocol: str, seed: int, variant: str) -> list[dict]:
    from training.calibration.across import across_split, unit_codes
    from training.pipeline import train
    from training.calibration.splits import Split

    column = PROTOCOLS[protocol]
    units = unit_codes(ds, [column])
    split = across_split(ds, [column], seed, 0.9, test_fraction=0.1)  # a test part of whole units, as measured
    config = _config(variant, column, seed, split.across["units"]["train"])
    if variant.startswith("position"):
        split = Split(train=split.train, calibration=split.calibration, test=split.test)
    t0 = time.perf_counter()
    result = train(ds, config, split=split)
    seconds = time.perf_counter() - t0
    test = split.test
    rows = []
    for name in result.model.methods:
        regions = result.model.predict_region(ds.X[test], method=name).regions
        inside = regions.contains(ds.Y[test])
        area = regions.volume("lebesgue")
        errors = np.linalg.norm(ds.Y[test] - regions.centers, axis=1)
        rows.append({"protocol": protocol, "seed": seed, "variant": variant, "method": name,
                     "coverage": float(inside.mean()), "unit_coverage": unit_coverage(inside, units[test]),
                     "area_m2": float(area.mean()) * M2_PER_KM2,
                     "oracle_m2": float(area.mean() * np.quantile(regions.distance(ds.Y[test]), 0.9)) * M2_PER_KM2,
                     "circle_m2": float(np.pi * np.quantile(errors, 0.9) ** 2) * M2_PER_KM2,
                     "centre_rmse_m": float(np.sqrt(np.mean(errors ** 2))) * M_PER_KM,
                     "centre_folds": result.centre.get("centre_folds"), "n_test_units": len(np.unique(units[test])),
                     "seconds": seconds})
    return rows


def run_representations(ds, protocol: str, seed: int) -> dict:
    """The k-NN centre's unit-fold and test RMSE (m) under each representation."""
    from training.calibration.across import UnitCrossFit, across_split, unit_codes
    from training.pipeline import TrainConfig, standardise

    column = PROTOCOLS[protocol]
    units = unit_codes(ds, [column])
    split = across_split(ds, [column], seed, 0.9, test_fraction=0.1)  # a test part of whole units, as measured
    out = {"protocol": protocol, "seed": seed}
    for rep in REPRESENTATIONS:
        config = TrainConfig(seed=seed, centre="knn", rssi="auto", rssi_representation=rep, calibrate_across=(column,))
        Xs = standardise(ds.X, split, config)[2]
        cf = UnitCrossFit(5, seed, centre_k=5).fit(config.make_centre, Xs, ds.Y, split.train, split.calibration, units,
                                                   meta=ds.meta, columns=[column])
        cv = np.sqrt(np.mean(np.sum((ds.Y[split.train] - cf.train_centres_) ** 2, axis=1))) * M_PER_KM
        centre = config.make_centre().fit(Xs[split.train], ds.Y[split.train])
        test = np.sqrt(np.mean(np.sum((ds.Y[split.test] - centre.predict(Xs[split.test])) ** 2, axis=1))) * M_PER_KM
        out[rep] = {"cv_rmse_m": float(cv), "test_rmse_m": float(test)}
    return out


def _cached(path: Path, make):
    """``make()``'s value cached at ``path`` with the commit it ran at."""
    return cached(path, lambda: {"commit": commit(), "value": make()})


def summarise(records: list[dict], reps: list[dict], argv: list[str]) -> tuple[list[dict], str]:
    import pandas as pd

    df = pd.DataFrame(records)
    runs = ", ".join(sorted({c[:7] for c in df["commit"]})) if len(df) else "-"
    lines = ["## Unit folds and representations", "",
             f"Command: `{command('across_folds', argv)}` at commit {commit()}; runs at {runs}. "
             "New phones and users: UJIIndoorLoc TrainingData, the product's across splits (`training.calibration.across.across_split`), the k-NN "
             "centre, GE and NLE at 0.9. `coverage`: pooled over the test rows (mean over splits); `area`: the "
             "regions' mean true area (m^2), mean and median over splits; `x position`: the median over splits of "
             "the area over the same split's `position` area; `oracle`: the area the same regions would need to hold "
             "exactly 90 % of the test rows, and `circle` the 90 % circle about the same centre (both read the test "
             "labels: bounds, not products; medians).", "",
             "| protocol | variant | method | splits | coverage % | per unit % | area m^2 mean | area median | "
             "x position | oracle median | circle median | centre RMSE m |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for protocol in PROTOCOLS:
        sub = df[df.protocol == protocol]
        ref = sub[sub.variant == "position"].set_index(["seed", "method"])["area_m2"]
        for variant in VARIANTS:
            for method in ("ge", "nle"):
                part = sub[(sub.variant == variant) & (sub.method == method)]
                if part.empty:
                    continue
                ratio = (part.set_index(["seed", "method"])["area_m2"] / ref).dropna()
                lines.append(f"| {protocol} | {variant} | {method} | {len(part)} | {100 * part.coverage.mean():.1f} | "
                             f"{100 * part.unit_coverage.mean():.1f} | {part.area_m2.mean():.4g} | "
                             f"{part.area_m2.median():.4g} | {ratio.median():.2f} | {part.oracle_m2.median():.4g} | "
                             f"{part.circle_m2.median():.4g} | {part.centre_rmse_m.mean():.1f} |")
    lines += ["", "### The RSSI representation: what a unit-fold cross-validation of the centre would choose", "",
              "The k-NN centre's RMSE (m, mean over splits) over the train part's 5 unit folds (`cv`) and on the test "
              "units (`test`) per representation; `cv-chosen`: the test RMSE of the representation of smallest "
              "`cv` on each split; `best`: of the smallest test RMSE (an oracle).", "",
              "| protocol | splits | " + " | ".join(f"{r} cv / test" for r in REPRESENTATIONS) + " | cv-chosen test | best |",
              "|---|---|" + "---|" * len(REPRESENTATIONS) + "---|---|"]
    for protocol in PROTOCOLS:
        part = [r for r in reps if r["protocol"] == protocol]
        if not part:
            continue
        cells = [f"{np.mean([r[k]['cv_rmse_m'] for r in part]):.1f} / {np.mean([r[k]['test_rmse_m'] for r in part]):.1f}"
                 for k in REPRESENTATIONS]
        chosen = np.mean([r[min(REPRESENTATIONS, key=lambda k: r[k]["cv_rmse_m"])]["test_rmse_m"] for r in part])
        best = np.mean([min(r[k]["test_rmse_m"] for k in REPRESENTATIONS) for r in part])
        lines.append(f"| {protocol} | {len(part)} | " + " | ".join(cells) + f" | {chosen:.1f} | {best:.1f} |")
    return records, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-19")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cached-only", action="store_true", help="summarise the cache; run nothing")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    protocols = [p for p in args.protocols.split(",") if p]
    variants = [v for v in args.variants.split(",") if v]
    for p in protocols:
        if p not in PROTOCOLS:
            parser.error(f"--protocols: {p!r} is not one of {', '.join(PROTOCOLS)}")
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}")
    if not args.cached_only:
        from tqdm.auto import tqdm

        from training.data.datasets import group_by_position, load_dataset

        ds = group_by_position(load_dataset("indoor_localization", args.data_dir))
        jobs = [(p, s, v) for p in protocols for s in parse_seeds(args.seeds) for v in [*variants, "representations"]]
        for protocol, seed, variant in tqdm(jobs, desc="across_folds"):
            path = CACHE / f"{variant}_{protocol}_{seed}.json"
            if variant == "representations":
                _cached(path, lambda: run_representations(ds, protocol, seed))
            else:
                _cached(path, lambda: run_variant(ds, protocol, seed, variant))
    records, reps = [], []
    for path in sorted(CACHE.glob("*.json")):
        record = json.loads(path.read_text())
        if path.name.startswith("representations_"):
            reps.append(record["value"])
        else:
            records += [{**r, "commit": record["commit"]} for r in record["value"]]
    if not records:
        sys.exit("nothing cached under benchmarks/cache/across_folds/: run without --cached-only first")
    rows, text = summarise(records, reps, argv)
    import pandas as pd

    write_csv(pd.DataFrame(rows).sort_values(["protocol", "variant", "seed", "method"]), OUT / "across_folds.csv")
    write_text(OUT / "across_folds.md", text)
    print(text)


if __name__ == "__main__":
    main()
