"""Should ``stack`` be a default ``--centre auto`` candidate? Measured where ``lmve-train`` is used by default:
the synthetic fingerprint survey, grouped by position (test and calibration hold whole reference points).

    python -m benchmarks.stack_grouped [--seeds 0-9] [--n-samples 1000,2000] [--jobs 2]

Per survey size and seed, ``lmve-train``'s default run (``TrainConfig`` as the CLI builds it: ``--centre auto``, groups
by position, group-subsample calibration, GE, NLE and LMVE) twice on the same data and split: with the
default candidates (paper, scaled, knn, hgb) and with ``stack`` added. Reported per configuration: the
centre chosen, the test centre RMSE and, per method, coverage and mean det(alpha C)^1/2, plus the paired
per-seed LMVE volume ratio (stack / default) and how often LMVE is the smallest of the three. Each run is
cached as JSON under ``benchmarks/cache/stack_grouped/`` (resumable); writes
``benchmarks/results/stack_grouped.{csv,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks.common import RESULTS, cache_dir, command, parallel, parse_seeds, write_csv, write_json, write_text

CACHE = cache_dir("stack_grouped")
OUT = RESULTS
CONFIGS = {"default": ("paper", "scaled", "knn", "hgb"), "with-stack": ("paper", "scaled", "knn", "hgb", "stack")}


def run_one(config: str, seed: int, n_samples: int) -> dict:
    """One ``lmve-train`` default run on the synthetic survey (cached)."""
    path = CACHE / f"n{n_samples}" / config / f"seed_{seed:03d}.json"
    if path.is_file():
        return json.loads(path.read_text())
    from training.data.datasets import group_by_position, load_dataset
    from training.pipeline import TrainConfig, train

    ds = group_by_position(load_dataset("synthetic", n_samples=n_samples, seed=seed), auto=True)
    cfg = TrainConfig(seed=seed, methods=("ge", "nle", "lmve"), centre="auto", centre_candidates=CONFIGS[config])
    result = train(ds, cfg)
    record = {"config": config, "seed": seed, "n_samples": n_samples, "centre": result.centre["name"],
              "cv_rmse": {k: v["rmse"] for k, v in result.centre["cv"].items()},
              "metrics": result.metrics}
    write_json(path, record)
    return record


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-9", help="split seeds, e.g. 0-9")
    p.add_argument("--n-samples", default="1000,2000",
                   help="readings per survey, comma-separated (1000: lmve-train's default)")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    sizes = [int(n) for n in args.n_samples.split(",")]
    tasks = [(c, s, n) for n in sizes for s in parse_seeds(args.seeds) for c in CONFIGS]
    records = parallel(run_one, tasks, args.jobs, desc="runs")
    rows = [{"n_samples": r["n_samples"], "config": r["config"], "seed": r["seed"], "centre": r["centre"],
             "method": m, "coverage": v["coverage"], "volume": v["volume_paper"], "centre_rmse": v["centre_rmse"]}
            for r in records for m, v in r["metrics"].items()]
    df = pd.DataFrame(rows)
    write_csv(df, OUT / "stack_grouped.csv")
    vol = df.pivot_table(index=["n_samples", "config", "seed"], columns="method", values="volume")
    lines = ["## Is `stack` worth a default candidate? The grouped synthetic survey", "",
             f"Command: `{command('stack_grouped', argv)}` "
             f"(seeds {args.seeds}; lmve-train's default run, grouped by position: 5 readings per reference "
             "point). Volume: mean det(alpha C)^1/2 on the test positions; `LMVE smallest`: seeds where LMVE's "
             "is the smallest of the three; `LMVE with / without`: the paired per-seed ratio of LMVE volumes.", "",
             "| readings | candidates | centre chosen | centre RMSE | GE | NLE | LMVE | LMVE coverage | LMVE smallest "
             "| LMVE with / without stack |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        ratio = vol.loc[(n, "with-stack"), "lmve"] / vol.loc[(n, "default"), "lmve"]
        for config in CONFIGS:
            d = df[(df.config == config) & (df.n_samples == n)]
            v = vol.loc[(n, config)]
            chosen = d.drop_duplicates("seed").centre.value_counts()
            paired = (f"mean {ratio.mean():.3f}, median {ratio.median():.3f}, < 1 on {int((ratio < 1).sum())}/"
                      f"{len(ratio)}" if config == "with-stack" else "")
            lines.append(
                f"| {n} | {config} | {', '.join(f'{k} {c}' for k, c in chosen.items())} | "
                f"{d[d.method == 'lmve'].centre_rmse.mean():.3f} | {v['ge'].mean():.2f} | {v['nle'].mean():.2f} | "
                f"{v['lmve'].mean():.2f} | {100 * d[d.method == 'lmve'].coverage.mean():.1f} % | "
                f"{int((v['lmve'] <= v[['ge', 'nle']].min(axis=1)).sum())}/{len(v)} | {paired} |")
    write_text(OUT / "stack_grouped.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
