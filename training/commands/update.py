"""``lmve-update``: a re-survey's labelled readings learned by a bundle's radio map, no retraining.

    lmve-update artifacts/site7/bundle resurvey.csv --out artifacts/site7/bundle-2026-11
    lmve-update BUNDLE resurvey.csv --out NEW --groups position_id
    lmve-update BUNDLE five_positions.csv --out NEW --groups none      # every row its own unit

The rows (CSV or Parquet with the bundle's feature and target columns, by name; a reading left empty is "not
heard") join the bundle's radio map as reference and calibration rows: the centre becomes a k-nearest-neighbour
search of the map (the bundle's own fingerprint or k-NN configuration, else the textbook one), so transmitters
the survey never heard but the re-survey does now place a reading, and every method's calibration is re-scored
on the map's rows, each centred on the other units' readings (:meth:`models.model.RegionModel.updated`). The
shapes are kept. Units are grouped as ``lmve-train`` groups a survey (each position, when most rows repeat
one; ``--groups`` as ``lmve-recalibrate``'s); a re-walked position joins the survey's unit there.

The error on the new rows is printed before (the bundle as it is) and after (each row centred without its own
unit's readings). Refused with one line and exit status 2, nothing written: a bundle without a radio map, a file
without rows, a missing feature or target column, or transmitter columns the bundle does not have that hold
readings (the bundle cannot place them: retrain with ``lmve-train``). The new bundle appears atomically; the
service loads it as any bundle (``POST /admin/reload``, or a model repository's new version).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from models.exceptions import InputError
from training import run_command


def build_parser() -> argparse.ArgumentParser:
    from training.commands.inputs import derived_parser

    return derived_parser("lmve-update", __doc__, "update", "a re-survey's labelled rows (.csv, .csv.gz or "
                          ".parquet): the bundle's feature and target columns",
                          "columns labelling each row's unit (a position, a walk). Default: each position a unit "
                          "when most rows repeat a position, else rows; none: every row its own unit")


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-update", build_parser(), _run, argv)


def _run(args) -> int:
    import numpy as np

    from models.bundle import save_bundle
    from models.calibration.grouping import AUTO, position_codes
    from training.commands.inputs import derived_parent, read_grouped_walk
    from training.figures.walk import units_of

    parent = derived_parent(args.bundle, args.out, "updated")
    if parent.radio_map is None:
        raise InputError(f"{args.bundle} keeps no radio map (trained before it, or without RSSI readings): it "
                         "cannot learn new rows; retrain with lmve-train", field="bundle",
                         expected="a bundle with radio.npz", received="none")
    refuse_unknown_transmitters(args.csv, parent)
    fresh, units, _ = read_grouped_walk(args.csv, parent, args.groups)
    if isinstance(units, str) and units == AUTO:
        units = position_codes(fresh.Y)
    before = figures(parent, fresh.X, fresh.Y)
    model, held_out = parent.updated(fresh.X, fresh.Y, units)
    after = figures(model, fresh.X, fresh.Y, held_out)
    m = parent.manifest
    n_units = len(fresh.X) if units is None else len(np.unique(units))
    record = {"parent_bundle_id": m.get("bundle_id"), "rows": int(len(fresh.X)), "units": int(n_units),
              "source": {"file": args.csv.name, "sha256": fresh.sha256}, "before": before, "after": after,
              "reference_rows": int(model.radio_map.reference.sum()),
              "calibration_rows": int(model.radio_map.calibration.sum()),
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    calibration = {k: v for k, v in (m.get("calibration") or {}).items() if k != "scale"}
    calibration.update(mode="updated", exact=False, guarantee=words(model, record))
    manifest = save_bundle(model, args.out, dataset=m.get("dataset"), metrics={},
                           training={**(m.get("training") or {}), "updated": record}, calibration=calibration)
    print(f"lmve-update: {args.out} (id {manifest['bundle_id']}, parent {m.get('bundle_id')}): {len(fresh.X)} rows "
          f"at {n_units} units learned; the radio map now has {record['reference_rows']} reference rows")
    units = units_of(model)
    for label, f in (("before", before), ("after ", after)):
        print(f"  {label}: centre error mean {f['centre_mean']:.2f} {units['error']}, p90 {f['centre_p90']:.2f} "
              f"{units['error']}; covered {100 * f['coverage']:.1f} % at {f['area']:.3g} {units['area']} "
              f"({f['method']})")
    print("  after: each new row centred on the other units' readings (its own left out)")
    print(f"  guarantee: {calibration['guarantee']}")
    return 0


def figures(model, X, Y, centres=None) -> dict:
    """The served method's figures on labelled rows: centre error (mean, p90), the share inside its region and
    the region's mean area; ``centres``: the rows' centres to score against (default: the model's)."""
    import numpy as np

    answer = model.predict_region(X, centers=None)
    method = answer.method
    reg = model.methods[method]
    mu = answer.regions.centers if centres is None else centres
    Xs = model.standardise(X)
    inside = reg.shape_.conformity_scores(Xs, Y - mu) <= reg.alpha_q_
    err = np.linalg.norm(Y - mu, axis=1)
    return {"method": method, "centre_mean": float(err.mean()), "centre_p90": float(np.quantile(err, 0.9)),
            "coverage": float(inside.mean()), "area": float(np.mean(answer.regions.volume()))}


def words(model, record: dict) -> str:
    level = model.coverage
    return (f"P ~ {level} (approximate) for a reading at a new position: the calibration re-scored on "
            f"{record['calibration_rows']} rows of the survey and {record['rows']} of the re-survey, each centred "
            "on the other units' readings")


#: a feature name: letters (and separators), then a number
NUMBERED = re.compile(r"^(\D+?)[_ -]?\d+$")


def refuse_unknown_transmitters(path: Path, model) -> None:
    """Raise :class:`InputError` naming the columns of ``path`` the bundle does not have that are named as its
    transmitters are (the same prefix, then a number) and hold a reading (not the not-detected code): the
    bundle has no column to map them to."""
    import numpy as np

    from models.preprocessing import READING_RANGE
    from training.data import tables

    fmt = tables.table_format(path, "--csv")
    names = tables.header(path, fmt)
    prefixes = {m.group(1) for m in map(NUMBERED.match, model.feature_names) if m}
    known = set(model.feature_names) | set(model.target_names)
    extra = [c for c in names if c not in known and (m := NUMBERED.match(c)) and m.group(1) in prefixes]
    if not extra:
        return
    heard = set()
    lo, hi = READING_RANGE
    for part, frame in tables.stream(path, fmt, names, extra, 65536):
        A = tables.numeric(frame, extra, part, path.name)
        with np.errstate(invalid="ignore"):
            heard |= {extra[j] for j in np.flatnonzero(((A >= lo) & (A <= hi)).any(axis=0))}
    if heard:
        listed = sorted(heard, key=extra.index)
        raise InputError(f"{path.name} has {len(listed)} transmitter column(s) the bundle does not have, with "
                         f"readings ({', '.join(listed[:5])}{', ...' if len(listed) > 5 else ''}): the bundle's "
                         f"{model.n_features} features have no place for them; retrain with lmve-train on the "
                         "survey and the re-survey", field="--csv", expected=f"the bundle's {model.n_features} "
                         "feature columns", received=f"{len(listed)} more")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
