"""UJIIndoorLoc LMVE training time before and after the speed-up, paired on the same splits.

    python -m benchmarks.uji_speed --seeds 0-4 --jobs 2

Per split (the paper's protocol: 80/10/10 random rows, the paper's SVR centre on standardised
features, ``training.pipeline.paper_split``), every variant fits LMVE on the same training rows and
residuals, is calibrated on the same calibration rows and tested on the same test rows; only the
LMVE parameters differ. One torch thread per fit (``--threads``), ``--jobs`` fits at a time.
Each (variant, seed) is cached as JSON under ``benchmarks/cache/uji_speed/`` (a rerun resumes).
Writes ``benchmarks/results/uji_speed.{csv,md}``: per variant mean LMVE seconds, test volume
(det(alpha C)^1/2 in m^2, the paper's convention), coverage and held-out volume, and per split
the paired figures; splits are paired on the seeds every listed variant has.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks.common import (M2_PER_KM2, RESULTS, cache_dir, command, parallel, parse_seeds, write_csv, write_json,
                               write_text)


#: LMVE parameters per variant. ``before``: the trainer as it was (float32, every column, all
#: configurations until each stops, 256-row mini-batches: the faster of its two UJIIndoorLoc settings);
#: ``before-1024``: the same with its automatic 1,024-row batches; ``after``: today's defaults;
#: ``after-all-columns`` and ``after-float32``: today's defaults but one lever.
VARIANTS = {
    "before": {"batch_size": 256, "precision": "float32", "drop_constant": False, "halve_every": None,
               "retire": False, "tol": 1e-4, "max_steps": 2000, "patience": 6, "eval_every": 25},
    "before-1024": {"batch_size": 1024, "precision": "float32", "drop_constant": False, "halve_every": None,
                    "retire": False, "tol": 1e-4, "max_steps": 2000, "patience": 6, "eval_every": 25},
    "after": {},
    # one lever of "after" undone at a time: the paper's widths from all 519 columns; float32
    "after-all-columns": {"drop_constant": False},
    "after-float32": {"precision": "float32"},
}
CACHE = cache_dir("uji_speed")
OUT = RESULTS
CSV_COLUMNS = ["dataset", "variant", "n_splits", "lmve_seconds_mean", "volume_mean", "coverage_mean",
               "lmve_seconds_std", "heldout_volume_mean", "volume_std", "seeds"]


def split_data(seed: int, data_dir: str | None):
    """Standardised features, residuals of the paper's SVR centre, and the split's row indices."""
    from sklearn.preprocessing import StandardScaler

    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, paper_split

    ds = load_dataset("indoor_localization", data_dir)
    split = paper_split(ds.X.shape[0], seed)
    Xs = StandardScaler().fit(ds.X[split.train]).transform(ds.X)
    centre = TrainConfig(seed=seed).make_centre().fit(Xs[split.train], ds.Y[split.train])
    return Xs, ds.Y - centre.predict(Xs), split


def run_one(variant: str, seed: int, threads: int, data_dir: str | None) -> dict:
    import torch

    from models.calibration.conformal import conformal_quantile
    from models.shapes.lmve import LMVEShape

    torch.set_num_threads(threads)
    X, R, split = split_data(seed, data_dir)
    est = LMVEShape(random_state=seed, **VARIANTS[variant])
    t0 = time.perf_counter()
    est.fit(X[split.train], R[split.train], coverage=0.9)
    seconds = time.perf_counter() - t0

    def scores(rows):
        S, r = est.predict_shape(X[rows]), R[rows]
        return np.einsum("bi,bij,bj->b", r, np.linalg.inv(S), r), np.sqrt(np.linalg.det(S))

    alpha = conformal_quantile(scores(split.calibration)[0], 0.9)
    M, sqrt_det = scores(split.test)
    chosen = min(est.grid_results_, key=lambda row: row["heldout_volume"])
    return {"variant": variant, "seed": seed, "threads": threads, "params": VARIANTS[variant],
            "lmve_seconds": seconds, "history": est.history_, "config": str(est.config_),
            "input_columns": est.n_input_columns_, "coverage": float(np.mean(M <= alpha)),
            "volume_m2": float(alpha * np.mean(sqrt_det) * M2_PER_KM2), "heldout_volume_m2": chosen["heldout_volume"] * M2_PER_KM2,
            "grid": est.grid_results_}


def cached(variant: str, seed: int, threads: int, data_dir: str | None) -> dict:
    path = CACHE / variant / f"seed_{seed:03d}.json"
    if path.is_file():
        return json.loads(path.read_text())
    record = run_one(variant, seed, threads, data_dir)
    write_json(path, record)
    return record


def tables(records: list[dict], variants: list[str], command: str) -> tuple["pd.DataFrame", str]:  # noqa: F821
    import pandas as pd

    every = pd.DataFrame([{k: r[k] for k in ("variant", "seed", "lmve_seconds", "volume_m2", "coverage",
                                              "heldout_volume_m2")} for r in records])
    seeds = sorted(set.intersection(*(set(every[every.variant == v].seed) for v in variants)))
    df = every[every.seed.isin(seeds)]
    rows = []
    for v in variants:
        d = df[df.variant == v]
        rows.append({"dataset": "indoor_localization", "variant": v, "n_splits": len(d),
                     "lmve_seconds_mean": d.lmve_seconds.mean(), "volume_mean": d.volume_m2.mean(),
                     "coverage_mean": d.coverage.mean(), "lmve_seconds_std": d.lmve_seconds.std(),
                     "heldout_volume_mean": d.heldout_volume_m2.mean(), "volume_std": d.volume_m2.std(),
                     "seeds": " ".join(map(str, seeds))})
    table = pd.DataFrame(rows, columns=CSV_COLUMNS)
    lines = ["## UJIIndoorLoc: LMVE training time before and after, paired on the same splits", "",
             f"Command: `{command}`. The paper's protocol (80/10/10 random rows, the paper's SVR centre); "
             "per split every variant fits on the same rows and residuals; one torch thread per fit. "
             "Volumes are det(alpha C)^1/2 in m^2 (the paper's convention; the paper reports 2.0e3 m^2 for "
             "LMVE); `held-out` is the calibrated volume on LMVE's held-out slice of the training rows that "
             "chose the configuration.", "",
             "| variant | splits | LMVE s (mean) | test volume m^2 | coverage % | held-out volume m^2 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['n_splits']} | {r['lmve_seconds_mean']:.0f} | "
                     f"{r['volume_mean']:.4g} ({r['volume_std']:.3g}) | {100 * r['coverage_mean']:.1f} | "
                     f"{r['heldout_volume_mean']:.4g} |")
    base = variants[0]
    lines += ["", f"Per split, paired (ratios against `{base}`):", "",
              "| seed | " + " | ".join(f"{v} s | {v} m^2" for v in variants) + " | "
              + " | ".join(f"speed-up {v} | volume {v}/{base}" for v in variants[1:]) + " |",
              "|---|" + "---|---|" * len(variants) + "---|---|" * (len(variants) - 1)]
    for s in seeds:
        by = {v: df[(df.variant == v) & (df.seed == s)].iloc[0] for v in variants}
        cells = [f"{by[v].lmve_seconds:.0f} | {by[v].volume_m2:.4g}" for v in variants]
        ratios = [f"{by[base].lmve_seconds / by[v].lmve_seconds:.1f}x | {by[v].volume_m2 / by[base].volume_m2:.3f}"
                  for v in variants[1:]]
        lines.append(f"| {s} | " + " | ".join(cells + ratios) + " |")
    unpaired = [f"- `{v}` on all {len(d)} cached splits (seeds {' '.join(map(str, sorted(d.seed)))}): LMVE "
                f"{d.lmve_seconds.mean():.0f} s, test volume {d.volume_m2.mean():.4g} m^2, coverage "
                f"{100 * d.coverage.mean():.1f} %, held-out volume {d.heldout_volume_m2.mean():.4g} m^2"
                for v in variants for d in [every[every.variant == v]] if len(d) > len(seeds)]
    if unpaired:
        lines += ["", "Unpaired:", *unpaired]
    notes = [f"- `{r['variant']}` seed {r['seed']}: {r['provenance']}" for r in records if r.get("provenance")]
    if notes:
        lines += ["", "Provenance:", *notes]
    for v in variants[1:]:
        b, a = df[df.variant == base].set_index("seed"), df[df.variant == v].set_index("seed")
        speed = np.exp(np.mean(np.log(b.lmve_seconds / a.lmve_seconds)))
        vol = np.exp(np.mean(np.log(a.volume_m2 / b.volume_m2)))
        lines += ["", f"`{v}` against `{base}` on {len(seeds)} paired splits: LMVE fit **{speed:.1f}x faster** "
                      f"(geometric mean of the per-split ratios), test volume ratio {vol:.3f}."]
    return table, "\n".join(lines) + "\n"




def main(argv: list[str] | None = None) -> int:

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--variants", default="before,after", help=f"comma-separated of {', '.join(VARIANTS)}; "
                   "the first is the baseline of the ratios")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--cached-only", action="store_true", help="tabulate what is cached; run nothing")
    args = p.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    tasks = [(v, s) for s in parse_seeds(args.seeds) for v in variants]
    if args.cached_only:
        tasks = [(v, s) for v, s in tasks if (CACHE / v / f"seed_{s:03d}.json").is_file()]
        records = [cached(v, s, args.threads, args.data_dir) for v, s in tasks]
    else:
        records = parallel(cached, [(v, s, args.threads, args.data_dir) for v, s in tasks], args.jobs,
                           desc="LMVE fits")
    table, md = tables(records, variants, command("uji_speed", argv))
    write_csv(table, OUT / "uji_speed.csv")
    write_text(OUT / "uji_speed.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
