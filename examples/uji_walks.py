"""A survey and validation walks from UJIIndoorLoc, as a positioning team has them after a site visit.

    python examples/uji_walks.py --out runs/walks                 # phones 6, 7 and 23 walk; the rest surveyed
    python examples/uji_walks.py --out runs/walks --walk-phones 13

Writes, from TrainingData (``$LMVE_DATA_DIR/indoor_localization``):

- ``survey.csv``: every other phone's readings: WAP001..WAP520, LONGITUDE, LATITUDE (EPSG:3857 metres),
  FLOOR, BUILDINGID: what ``lmve-train --csv`` takes;
- ``walk.csv``: the walking phones' readings, with PHONEID, USERID and TIMESTAMP besides: what
  ``lmve-evaluate`` takes;
- ``walk-a.csv`` and ``walk-b.csv``: the walk split by reference position (every other position, so that
  no position is in both): recalibrate on one, evaluate on the other.

The guide ``docs/guides/validate.md`` runs the whole loop on these files.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

SURVEY_COLUMNS = ["LONGITUDE", "LATITUDE", "FLOOR", "BUILDINGID"]
WALK_COLUMNS = [*SURVEY_COLUMNS, "PHONEID", "USERID", "TIMESTAMP"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--walk-phones", default="6,7,23", help="PHONEIDs held out of the survey (default 6,7,23)")
    p.add_argument("--data-dir", type=Path, default=Path(os.environ.get("LMVE_DATA_DIR", "../shared/datasets")))
    args = p.parse_args(argv)
    df = pd.read_csv(args.data_dir / "indoor_localization" / "TrainingData.csv.gz")
    waps = [c for c in df.columns if c.startswith("WAP")]
    phones = [int(v) for v in args.walk_phones.split(",") if v.strip()]
    walking = df["PHONEID"].isin(phones)
    if not walking.any():
        raise SystemExit(f"no readings of phones {phones}; TrainingData has {sorted(df['PHONEID'].unique())}")
    args.out.mkdir(parents=True, exist_ok=True)
    df.loc[~walking, waps + SURVEY_COLUMNS].to_csv(args.out / "survey.csv", index=False)
    walk = df.loc[walking, waps + WALK_COLUMNS]
    walk.to_csv(args.out / "walk.csv", index=False)
    position = walk.groupby(["LONGITUDE", "LATITUDE"]).ngroup()
    walk[position % 2 == 0].to_csv(args.out / "walk-a.csv", index=False)
    walk[position % 2 == 1].to_csv(args.out / "walk-b.csv", index=False)
    print(f"{args.out}: survey.csv {int((~walking).sum())} readings; walk.csv {len(walk)} readings of phones "
          f"{phones} at {position.nunique()} positions (walk-a.csv {int((position % 2 == 0).sum())}, "
          f"walk-b.csv {int((position % 2 == 1).sum())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
