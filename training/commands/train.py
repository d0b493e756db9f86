"""``lmve-train``: data -> calibrated bundle + report.

Examples::

    lmve-train                                   # synthetic data, writes artifacts/synthetic/
    lmve-train --dataset enb --coverage 0.9 --seed 3
    lmve-train --csv survey.csv --targets x,y --features rssi_1,rssi_2,rssi_3 --out runs/site7
    lmve-train --dataset indoor_localization --split-by BUILDINGID --out repo/   # one model per building

Writes ``OUT/bundle/`` (what ``lmve-serve --bundle`` loads), ``OUT/report.md``,
``OUT/metrics.json`` and ``OUT/test_regions.png``. Nothing is written unless training succeeds.
With ``--split-by COL``, ``OUT`` is a model repository instead (``training.commands.sites``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from models.exceptions import InputError
from training import run_command
from training.commands import train_args
from training.commands.train_steps import fit_and_write, grouping_line, load_data, train_site
from training.commands.train_args import as_flag, config_from_args
from training.pipeline.meter import StageMeter


def build_parser():
    """``lmve-train``'s parser (:mod:`training.commands.train_args`), this module's docstring its usage."""
    return train_args.build_parser(__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-train", build_parser(), _flagged, argv)


def _flagged(args) -> int:
    """:func:`_run`, a configuration error from training (the plan's CRS, a method's check) naming its flag."""
    try:
        return _run(args)
    except InputError as exc:
        raise as_flag(exc) from None


def _run(args) -> int:
    from training.pipeline.served_volume import selection_line
    from training.commands.train_report import centre_line, metrics_table

    t0 = time.perf_counter()
    meter = StageMeter()
    with meter.stage("load"):
        dataset = load_data(args)
    config = config_from_args(args)
    if args.split_by:
        return _run_split(args, dataset, config)
    out = args.out or Path("artifacts") / dataset.name
    result, manifest = fit_and_write(dataset, config, args, out / "bundle", out, meter)
    if line := grouping_line(result, config):
        print(f"lmve-train: {line}")
    test = result.split.test
    held = f"test split {len(test)} rows" if len(test) else \
        f"no test part: each of the {result.split.across['units']['calibration']} units left out in turn"
    print(f"\n{dataset.name}: {dataset.X.shape[0]} rows, d={dataset.X.shape[1]}, n={dataset.Y.shape[1]}; "
          f"{held}; {time.perf_counter() - t0:.1f} s, peak memory "
          f"{meter.peak():.0f} MiB (per stage: {out / 'report.md'})")
    print(metrics_table(result.metrics, config.coverage, "test" if len(test) else "held-out"))
    print(f"served: {selection_line(result.model.selection)}")
    _print_calibration(result.split, result.calibration)
    if result.model.floors is not None:
        print(f"floors: {floor_line(result.model)}")
    print(f"centre: {centre_line(result.centre)}")
    print(f"RSSI preprocessing: {result.training['preprocess']}")
    print(f"\nbundle  {out / 'bundle'}  (id {manifest['bundle_id']})\nreport  {out / 'report.md'}\n"
          f"plot    {out / 'test_regions.png'}")
    return 0


def _print_calibration(split, calibration: dict) -> None:
    """The terminal's calibration lines: few groups, units, the guarantee, the scale and the survey-size estimate."""
    from training.commands.train_report import across_line
    from training.figures.survey_scale import scale_line, size_line

    if split.adjustment:
        print(f"few groups: {split.adjustment['words']}")
    if split.across:
        print(f"calibrated across: {across_line(split.across)}")
    print(f"guarantee: {calibration['guarantee']}")
    for what, line in (("scale", scale_line(calibration.get("scale"))),
                       ("survey size", size_line(calibration.get("scale")))):
        if line:
            print(f"{what}: {line}")


def _run_split(args, dataset, config) -> int:
    """``--split-by COL``: one bundle per value into the model repository ``--out``, one after the other here
    (:mod:`training.commands.sites`) or on a Dask cluster (:mod:`training.commands.sites_dask`)."""
    from training.commands.sites import parse_names, train_repository

    out = args.out or Path("artifacts") / f"{dataset.name}-by-{args.split_by}"
    t0 = time.perf_counter()
    source = str(args.csv) if args.csv is not None else dataset.name
    names = parse_names(args.split_names)
    if args.engine == "dask":
        from training.commands.sites_dask import train_repository_dask

        repo = train_repository_dask(dataset, args, config, out, names=names, source=source)
    else:
        repo = train_repository(dataset, args.split_by, out,
                                lambda rows, name: train_site(rows, name, config, args, out), names=names,
                                source=source, progress=not args.quiet)
    print(f"\n{dataset.name} by {args.split_by}: {len(repo['models'])} models in {time.perf_counter() - t0:.1f} s "
          f"-> {out}{' (Dask)' if args.engine == 'dask' else ''}")
    width = max((len(n) for n in (*repo["models"], *repo["failed"])), default=5)
    for name, m in repo["models"].items():
        cov = m["test_coverage"]
        print(f"  {name:<{width}}  {m['rows']:>6} rows  serves {m['primary_method'].upper():<5} test coverage "
              f"{'-' if cov is None else f'{100 * cov:.1f} %'}  bundle {m['bundle_id']}")
    for name, f in repo["failed"].items():
        print(f"  {name:<{width}}  {f['rows']:>6} rows  FAILED: {f['reason']}")
    print(f"\nrepository  {out / 'repository.json'}\nserve       lmve-serve --model-repository {out}")
    return 1 if repo["failed"] else 0


def floor_line(model) -> str:
    """The floor part in one line: the classifier, and the served method's held-out figures."""
    floors = model.floors
    sel = floors.selection
    m = floors.metrics.get(model.primary_method, {})
    figures = (f"; test: joint coverage {100 * m['joint_coverage']:.1f} %, top floor right {100 * m['floor_hit_rate']:.1f} %, "
               f"{m['set_size_mean']:.2f} floors per set" if m else "")
    return (f"{len(floors.labels)} classes of {'/'.join(floors.labels.columns)}, classifier {sel.get('chosen')} "
            f"({sel.get('rule')}, {sel.get('selected_by')}){figures}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
