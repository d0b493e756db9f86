"""``lmve-recalibrate``: new calibration scores for a bundle from fresh labelled rows, no retraining.

    lmve-recalibrate artifacts/site7/bundle walk.csv --out artifacts/site7/bundle-2026-11
    lmve-recalibrate BUNDLE fresh.csv --out NEW --groups position_id
    lmve-recalibrate BUNDLE fresh.csv --out NEW --groups none      # every row its own draw

The new bundle keeps the parent's preprocessing, scaler, centre and shapes and replaces the
calibration scores with those of the fresh rows (the CSV needs the bundle's feature and target
columns, by name; a ``--centre-columns`` bundle its estimate columns too; a floor bundle its floor (and
building) columns, whose joint calibration is renewed as well). The walk files of ``lmve-evaluate`` are read
the same way (CSV or Parquet; a bad cell named by its column and line).

Rows are grouped as ``lmve-train`` groups them: when most fresh rows repeat a position (several readings
at each surveyed point), each position is one group and the guarantee stays one for readings at new
positions; ``--groups COL`` names other groups, ``--groups none`` counts every row as its own draw. The
guarantee is printed before and after, in the report's words; a level the fresh rows or groups cannot
attain is refused, naming the highest they attain. The manifest records the parent bundle's id, the
number of rows and groups, the source file's sha256 and when. Nothing is written when anything is wrong;
the new bundle appears atomically.
"""

from __future__ import annotations

import argparse
import sys

from training import run_command


def build_parser() -> argparse.ArgumentParser:
    from training.commands.inputs import derived_parser

    p = derived_parser("lmve-recalibrate", __doc__, "recalibrate", "fresh labelled rows (a validation walk: .csv, "
                       ".csv.gz or .parquet): the bundle's feature and target columns, and a floor bundle's floor "
                       "column(s)", "columns labelling each row's group: one calibration score per group (a "
                       "guarantee for rows from new groups). Default: each position a group when most rows "
                       "repeat a position (as lmve-train groups a survey), else rows; none: every row its own draw")
    p.add_argument("--group-rule", choices=("subsample", "pooled"), default="subsample",
                   help="with groups: subsample draws one row per group (exact P >= level; default), pooled "
                        "weighs every row by its group's size (approximate, tighter with few groups)")
    p.add_argument("--seed", type=int, default=0, help="seed of the per-group draw (default 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-recalibrate", build_parser(), _run, argv)


def _run(args) -> int:
    from models.bundle import save_recalibrated
    from models.recalibration import recalibrate, stated_guarantee, threshold_changes
    from training.commands.inputs import derived_parent, read_grouped_walk

    parent = derived_parent(args.bundle, args.out, "recalibrated")
    m = parent.manifest
    fresh, groups, group_cols = read_grouped_walk(args.csv, parent, args.groups)
    result = recalibrate(parent, fresh.X, fresh.Y, groups=groups, grouping=group_cols, centers=fresh.centers,
                         group_rule=args.group_rule, seed=args.seed, floors=fresh.floors, buildings=fresh.buildings,
                         source={"file": args.csv.name, "sha256": fresh.sha256})
    if result.grouped_by == "position":
        print(f"lmve-recalibrate: {100 * result.repeated_share:.0f} % of the fresh rows share their position with "
              f"another row (a survey walk): grouping by position ({result.n_groups} positions), so the guarantee "
              "is for readings at new positions. --groups none counts every row as its own draw.")
    manifest = save_recalibrated(parent, result, args.out)
    print(f"lmve-recalibrate: {args.out} (id {manifest['bundle_id']}, parent {m.get('bundle_id')}): "
          f"{result.n_rows} fresh rows" + (f" in {result.n_groups} groups" if result.n_groups else ""))
    print(f"  guarantee before: {stated_guarantee(parent)}")
    print(f"  guarantee after:  {result.guarantee}")
    for name, (old, new) in threshold_changes(parent, result.model).items():
        print(f"  {name:<7} alpha_q {old:.4g} -> {new:.4g}")
    scale = result.calibration.get("scale")
    if scale:
        from training.figures.survey_scale import scale_line

        print(f"  scale (fresh rows): {scale_line(scale)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
