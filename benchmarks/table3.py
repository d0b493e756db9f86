"""Table III measured: storage and inference cost per method and dataset.

    python -m benchmarks.table3 [--datasets enb,ble_rssi,residential_building]

For each dataset: train split seed 0 (paper protocol), write the bundle, and report

* ``bytes``: the method's own file in the bundle (``<method>.npz``, see ``models.registry``); the
  centre, scaler and calibration scores are shared;
* ``floats``: the paper's Table III count (GE n^2, NLE m_t (n + d), LMVE its weights);
* ``shape_us_per_row`` at batch 1 and 1,024: the method's shape computation alone;
* ``region_us_per_row`` at batch 1 and 1,024: raw features -> calibrated regions, centre included;
* ``*_vs_ge``: the same divided by GE's, measured in the same process (the machine is shared
  and noisy: ratios are the figures to compare).

Writes ``benchmarks/results/table3.csv`` and ``table3.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import RESULTS, write_csv, write_text
from models import registry

FILES = {name: spec.file for name, spec in registry.METHODS.items()}


def per_row_us(fn, X, repeats: int) -> float:
    fn(X)  # warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(X)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / X.shape[0] * 1e6


def paper_floats(name: str, model, n_train: int) -> int:
    d, n = model.n_features, model.n_targets
    if name == "ge":
        return n * n
    if name == "nle":
        return n_train * (n + d)
    shape = model.methods[name].shape_
    if name == "lmve":
        return int(sum(W.size + b.size for W, b in shape.layers_))
    return int(sum(W.size for W in shape.coefs_) + sum(b.size for b in shape.intercepts_))


def main(argv=None) -> int:
    from models.bundle import save_bundle
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="enb,ble_rssi,residential_building")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    for name in args.datasets.split(","):
        ds = load_dataset(name)
        result = train(ds, TrainConfig(seed=0, use_groups=False))  # the paper's row protocol
        model = result.model
        with tempfile.TemporaryDirectory() as tmp:
            save_bundle(model, Path(tmp) / "b", dataset=ds.info)
            sizes = {m: (Path(tmp) / "b" / f).stat().st_size for m, f in FILES.items()}
            shared = sum((Path(tmp) / "b" / f).stat().st_size for f in ("scaler.npz", "centre.npz", "calibration.npz"))
        rng = np.random.default_rng(0)
        X_raw = ds.X[rng.choice(result.split.test, size=1024, replace=True)]
        Xs = model.standardise(X_raw)
        for batch in (1, 1024):
            Xb, Xr = Xs[:batch], X_raw[:batch]
            reps = 200 if batch == 1 else 10
            timing = {}
            for m in FILES:
                shape = model.methods[m].shape_
                fn = shape.predict_scale if m == "copula" else shape.predict_shape
                timing[m] = (per_row_us(fn, Xb, reps),
                             per_row_us(lambda X, m=m: model.predict_region(X, method=m, typicality=False).regions, Xr, reps))
            for m in FILES:
                rows.append({"dataset": name, "method": m, "batch": batch, "bytes": sizes[m], "shared_bytes": shared,
                             "floats": paper_floats(m, model, len(result.split.train)),
                             "shape_us_per_row": timing[m][0], "region_us_per_row": timing[m][1],
                             "shape_vs_ge": timing[m][0] / timing["ge"][0],
                             "region_vs_ge": timing[m][1] / timing["ge"][1]})
        print(f"{name}: done", file=sys.stderr)
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(df, args.out / "table3.csv")
    lines = ["## Table III measured: storage and inference per method", "",
             "Command: `python -m benchmarks.table3`; split seed 0 of each dataset, one thread. "
             "`bytes` is the method's own bundle file (centre, scaler and calibration scores are shared: "
             "`shared`). `floats` is the paper's Table III count. Times are medians, microseconds per row; "
             "`x GE` divides by GE's time measured in the same process.", "",
             "| dataset | method | bytes | floats | shared | shape us/row @1 | x GE | shape us/row @1024 | x GE "
             "| region us/row @1 | region us/row @1024 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (d, m), g in df.groupby(["dataset", "method"], sort=False):
        b1, bk = g[g.batch == 1].iloc[0], g[g.batch == 1024].iloc[0]
        lines.append(f"| {d} | {m} | {b1.bytes} | {b1.floats} | {b1.shared_bytes} | {b1.shape_us_per_row:.1f} | "
                     f"{b1.shape_vs_ge:.1f} | {bk.shape_us_per_row:.2f} | {bk.shape_vs_ge:.1f} | "
                     f"{b1.region_us_per_row:.1f} | {bk.region_us_per_row:.2f} |")
    write_text(args.out / "table3.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
