"""The paper's benchmark: data sets x split seeds x methods, following its protocol (formerly ``lmve-bench``).

    python -m benchmarks.bench --datasets enb,ble_rssi,residential_building --seeds 0-49 --jobs 2
    python -m benchmarks.bench --datasets enb --seeds 0-9 --variant nll            # a variant beyond the paper
    python -m benchmarks.bench --datasets enb --seeds 0-49 --scheduler tcp://10.0.0.5:8786   # on a Dask cluster

Each (variant, dataset, seed) is one task whose result is cached as JSON under ``--cache``;
a rerun skips what is cached (resumable). Tasks run in local processes with joblib, or on a
Dask cluster when ``--scheduler`` names one (start its workers in the repository root, so that
they import ``benchmarks``). ``--out`` receives ``table1.csv`` (one row per dataset and method),
``runs_<variant>.csv`` (one row per split and method), a markdown table beside the paper's
Table I, and a plot of the volume distributions; ``--protocol`` writes the shift table instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.common import parse_seeds, variant_dir, write_csv, write_text
from benchmarks.harness.peer import PEER
from benchmarks.harness.tables import (centre_tables, markdown_table, plot_volumes, reference_pairs, runs_table,
                                       table1, twin_note)
from benchmarks.harness.tasks import SplitTask, dataset, from_twin, run_tasks
from benchmarks.harness.variants import VARIANTS
from models.exceptions import InputError, LMVEError
from training import require_training_install

PROG = "python -m benchmarks.bench"


def build_parser() -> argparse.ArgumentParser:
    from training.data.datasets import PAPER_DATASETS

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="enb,ble_rssi,residential_building",
                   help=f"comma-separated subset of {','.join(PAPER_DATASETS)},synthetic")
    p.add_argument("--seeds", default="0-49", help="split seeds, e.g. 0-49 or 0,3,7 (default 0-49)")
    p.add_argument("--methods", default="ge,nle,lmve,copula",
                   help=f"comma-separated: ge, nle, lmve, copula, and {PEER} (the peer: MAPIE 1.6's multivariate "
                        "standardised residuals, its own network for mean and covariance; the bench extra)")
    p.add_argument("--coverage", type=float, default=0.9, help="target coverage eta (default 0.9)")
    p.add_argument("--variant", default="paper", choices=sorted(VARIANTS),
                   help="what differs from the paper's protocol (default paper; benchmarks.harness.variants); the "
                        "results go to OUT/variants/VARIANT/")
    p.add_argument("--jobs", type=int, default=2, help="local worker processes (default 2)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (tcp://host:8786); default: local")
    p.add_argument("--cache", type=Path, default=Path("benchmarks/cache"),
                   help="one JSON file per split, so a rerun resumes (default benchmarks/cache)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                   help="where the tables go (default benchmarks/results)")
    p.add_argument("--data-dir", default=None, help="folder of the paper datasets (default $LMVE_DATA_DIR)")
    p.add_argument("--lmve-max-steps", type=int, default=None, help="LMVE: cap on steps per phase")
    p.add_argument("--peer-epochs", type=int, default=300, help=f"{PEER}: training epochs (default 300, MAPIE's)")
    p.add_argument("--protocol", default=None,
                   help="shift protocols instead of the paper's split, comma-separated: random, leave-location-out, "
                        "leave-phone-out, leave-user-out (indoor_localization); writes shift.csv and shift.md")
    p.add_argument("--calibration", default="rows,groups,groups-pooled,across",
                   help="with --protocol: which calibrations to tabulate: rows, groups (exact rule), groups-pooled, "
                        "across (across-PHONEID / across-USERID on leave-phone-out / leave-user-out: calibration "
                        "units held out of training, training.calibration.across; all are computed)")
    p.add_argument("--cached-only", action="store_true",
                   help="tabulate the splits already in the cache and run none (says which are missing)")
    p.add_argument("--merge", action="store_true",
                   help="keep the rows of datasets not in this run from the existing runs csv, and tabulate all")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p



def _tasks(args) -> list[SplitTask]:
    """The run's tasks, every name checked first (a bad data set, protocol or calibration fails before any
    split runs); ``--cached-only`` keeps the cached ones and says which are left out."""
    from benchmarks.harness.shift import CALIBRATIONS, PROTOCOLS

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    overrides = {"max_steps": args.lmve_max_steps} if args.lmve_max_steps else {}
    protocols = [None] if args.protocol is None else [p.strip() for p in args.protocol.split(",") if p.strip()]
    if args.protocol is not None:
        bad = [p for p in protocols if p not in PROTOCOLS] + [c for c in args.calibration.split(",")
                                                               if c not in CALIBRATIONS]
        if bad:
            raise InputError(f"unknown protocol or calibration {', '.join(bad)}; protocols: {', '.join(PROTOCOLS)}; "
                             f"calibrations: {', '.join(CALIBRATIONS)}")
    tasks = [SplitTask(d, s, args.variant, args.coverage, methods, overrides, args.data_dir, protocol,
                       args.peer_epochs)
             for protocol in protocols for d in datasets for s in parse_seeds(args.seeds)]
    for d in set(datasets):  # fail early on a bad name or a missing data directory
        dataset(d, args.data_dir)
    if args.cached_only:
        missing = [t for t in tasks if not (args.cache / t.key()).is_file() and from_twin(t, str(args.cache)) is None]
        tasks = [t for t in tasks if t not in missing]
        if missing:
            print(f"{PROG}: --cached-only: {len(missing)} of {len(tasks) + len(missing)} splits are not "
                  f"in {args.cache} and are left out, e.g. {missing[0].key()}", file=sys.stderr)
        if not tasks:
            raise InputError(f"--cached-only: none of the requested splits is in {args.cache}")
    return tasks


def _write_shift(args, records: list[dict], command: str, wall: float) -> None:
    """``shift.{csv,md}`` from the shift protocols' records."""
    from benchmarks.harness.shift import shift_tables

    table, md = shift_tables(records, args.calibration.split(","), command, wall)
    write_csv(table, args.out / "shift.csv")
    write_text(args.out / "shift.md", md)
    print(md)


def _write_table1(args, records: list[dict], command: str, wall: float) -> None:
    """``runs.csv``, ``table1.{csv,md}``, ``volumes.png`` and, for a centre variant, ``centre.{csv,md}``, in
    ``--out`` for the paper protocol, else in its ``variants/<V>/`` (``auto-centre``'s centre tables in ``--out``);
    ``--merge`` keeps the rows of the other data sets from the existing ``runs.csv``."""
    runs = runs_table(records)
    where = args.out if args.variant == "paper" else variant_dir(args.out, args.variant)
    where.mkdir(parents=True, exist_ok=True)
    kept = []
    if args.merge and (where / "runs.csv").is_file():
        import pandas as pd

        old = pd.read_csv(where / "runs.csv")
        old = old[~old.dataset.isin(set(runs.dataset))]
        kept = list(dict.fromkeys(old.dataset))
        runs = pd.concat([old, runs], ignore_index=True)
    t1 = table1(runs)
    write_csv(runs, where / "runs.csv")
    write_csv(t1, where / "table1.csv")
    write_text(where / "table1.md",
               markdown_table(t1, f"Table I reproduction, variant `{args.variant}`, coverage {args.coverage}")
               + f"\nCommand: `{command}`; this invocation's wall time {wall:.0f} s (cached splits are not re-run)."
               + (f" Rows of {', '.join(kept)} are kept from the previous `runs.csv` (--merge)." if kept else "")
               + twin_note(records) + "\n"
               + (reference_pairs(runs) if "volume_paper_exact" in runs and runs.volume_paper_exact.notna().any()
                  else ""))
    plot_volumes(runs, where / "volumes.png")
    if args.variant.startswith(("auto-centre", "joint-centre")):
        centre_tables(runs, t1, args.out if args.variant == "auto-centre" else where, command, wall)
    print(markdown_table(t1, f"variant {args.variant}"))


def main(argv: list[str] | None = None) -> int:
    require_training_install(PROG)
    args = build_parser().parse_args(argv)
    command = " ".join([PROG, *(argv if argv is not None else sys.argv[1:])])
    try:
        tasks = _tasks(args)
        t0 = time.perf_counter()
        records = run_tasks(tasks, args.cache, args.jobs, args.scheduler, progress=not args.quiet)
        wall = time.perf_counter() - t0
    except LMVEError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (_write_shift if args.protocol is not None else _write_table1)(args, records, command, wall)
    print(f"wall {wall:.1f} s; results in {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
