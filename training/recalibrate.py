"""``lmve-recalibrate``: new calibration scores for a bundle from fresh labelled rows, no retraining.

    lmve-recalibrate artifacts/site7/bundle fresh.csv --out artifacts/site7/bundle-2026-11
    lmve-recalibrate BUNDLE fresh.csv --out NEW --groups position_id

The new bundle keeps the parent's preprocessing, scaler, centre and shapes and replaces the
calibration scores with those of the fresh rows (the CSV needs the bundle's feature and target
columns, by name; a ``--centre-columns`` bundle its estimate columns too). With ``--groups`` the
calibration keeps one score per group, as ``lmve-train --groups`` does. The manifest records the
parent bundle's id, the number of rows and groups, the source file's sha256 and when. Nothing is
written when anything is wrong; the new bundle appears atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from models.exceptions import InputError
from training import run_command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lmve-recalibrate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path, help="the bundle to recalibrate (left untouched)")
    p.add_argument("csv", type=Path, help="fresh labelled rows: the bundle's feature and target columns")
    p.add_argument("--out", type=Path, required=True, help="where the new bundle goes")
    p.add_argument("--groups", default=None, metavar="COL[,COL]",
                   help="columns labelling each row's group: one calibration score per group (a guarantee for "
                        "rows from new groups)")
    p.add_argument("--group-rule", choices=("subsample", "pooled"), default="subsample")
    p.add_argument("--seed", type=int, default=0, help="seed of the per-group draw (default 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-recalibrate", build_parser(), _run, argv)


def _run(args) -> int:
    from models.bundle import load_bundle
    from models.bundle import save_recalibrated
    from models.calibration.recalibration import recalibrate, threshold_changes
    from training.datasets import load_csv

    if args.out.resolve() == args.bundle.resolve():
        raise InputError("--out must differ from the bundle being recalibrated (it stays as it is)", field="--out",
                         expected="a new directory", received=str(args.out))
    parent = load_bundle(args.bundle)
    m = parent.manifest
    centre = (m.get("training") or {}).get("centre")
    centre_columns = centre.get("columns") if isinstance(centre, dict) and parent.requires_centers else None
    group_cols = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups else None
    fresh = load_csv(args.csv, list(parent.target_names), list(parent.feature_names), groups=group_cols,
                     centre_columns=centre_columns, min_rows=1)
    result = recalibrate(parent, fresh.X, fresh.Y, groups=fresh.groups, grouping=group_cols, centers=fresh.centers,
                         group_rule=args.group_rule, seed=args.seed,
                         source={"file": args.csv.name, "sha256": fresh.sha256})
    manifest = save_recalibrated(parent, result, args.out)
    print(f"lmve-recalibrate: {args.out} (id {manifest['bundle_id']}, parent {m.get('bundle_id')}): "
          f"{result.n_rows} fresh rows" + (f" in {result.n_groups} groups" if result.n_groups else ""))
    for name, (old, new) in threshold_changes(parent, result.model).items():
        print(f"  {name:<7} alpha_q {old:.4g} -> {new:.4g}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
