"""A validation walk of the embedded synthetic site (what ``scripts/serve.sh`` trains), by two phones, one of which
reads every access point ``--offset-db`` weaker than the survey's phones did.

    python examples/synthetic_walk.py --out runs/walk                    # phone 1 reads 8 dB weak
    python examples/synthetic_walk.py --out runs/walk --offset-db 0      # both phones like the survey's

Writes, with the survey's column names (``beacon_01`` ... ``beacon_16``, ``x_m``, ``y_m``) and ``PHONEID``:

- ``walk.csv``: ``--positions`` positions the survey did not visit (uniform over the floor), ``--readings``
  readings at each, every other reading by phone 1: what ``lmve-evaluate`` takes;
- ``walk-a.csv`` and ``walk-b.csv``: the walk split by position (every other position, so that no position is
  in both): recalibrate on one, evaluate on the other.

The README's "Check it on a walk" runs it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the folder the CSV files go to")
    p.add_argument("--positions", type=int, default=60, help="positions walked (default 60)")
    p.add_argument("--readings", type=int, default=6, help="readings at each position (default 6)")
    p.add_argument("--offset-db", type=float, default=8.0, help="how much weaker phone 1 reads (default 8 dB)")
    p.add_argument("--seed", type=int, default=11, help="which positions and readings (default 11)")
    args = p.parse_args(argv)
    import pandas as pd

    from training.data.datasets import load_dataset
    from training.data.synthetic import make_new_positions

    site = load_dataset("synthetic", n_samples=10)  # the site's column names (the survey itself is not needed)
    X, Y, point, _ = make_new_positions(args.positions, readings=args.readings, seed=args.seed)
    phone = np.arange(len(X)) % 2
    X = np.round(X - args.offset_db * (phone == 1)[:, None], 1)
    frame = pd.DataFrame(X, columns=site.feature_names)
    frame[list(site.target_names)] = Y
    frame["PHONEID"] = phone
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "walk.csv", index=False)
    frame[point % 2 == 0].to_csv(args.out / "walk-a.csv", index=False)
    frame[point % 2 == 1].to_csv(args.out / "walk-b.csv", index=False)
    print(f"{args.out}: walk.csv ({len(frame)} readings at {args.positions} positions, phone 1 "
          f"{args.offset_db:g} dB weak), walk-a.csv and walk-b.csv (every other position)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
