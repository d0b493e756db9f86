"""The steps of ``lmve-train`` under its printing: load the data its flags name, call ``train()``, write the
bundle (:meth:`training.pipeline.run.TrainResult.save`) and the report; one model of a ``--split-by``
repository (:func:`train_site`), which the local and the Dask engine both call. Every training decision
(grouping, guarantee, scale) is ``train()``'s."""

from __future__ import annotations

from pathlib import Path

from models.calibration.grouping import parse_groups, share_of_repeated_positions
from models.exceptions import InputError, LMVEError
from training.data.datasets import load_csv, load_dataset
from training.pipeline import train
from training.pipeline.meter import StageMeter


def fit_and_write(dataset, config, args, bundle: Path, report: Path, meter: StageMeter):
    """Train on ``dataset``, write the bundle to ``bundle`` and the report and plot under ``report``;
    ``(result, manifest)``."""
    from training.commands.train_report import plot_test_regions, write_report

    result = train(dataset, config, meter=meter)
    with meter.stage("save bundle"):
        manifest = result.save(bundle)
    held, trained = result.held_out, result.dataset  # no test part (across units, cross-fit): each unit in turn
    test = result.split.test if held is None else held["rows"]
    report.mkdir(parents=True, exist_ok=True)
    with meter.stage("plot"):
        plot_test_regions(report / "test_regions.png", result.model, trained.X[test], trained.Y[test],
                          seed=config.seed, centers=None if trained.centers is None else trained.centers[test],
                          extent=result.calibration.get("scale"),
                          regions=None if held is None else {m: held[m] for m in result.model.serving_order})
        mapped = plot_map(report / "survey_map.png", result.model)
    write_report(report, trained.info, result.metrics, config.coverage, manifest, result.timings, meter.stages,
                 survey_map=mapped)
    return result, manifest


def plot_map(path: Path, model) -> dict | None:
    """A survey's map (``survey_map.png``: where the served regions are large, :mod:`models.survey_map`); its
    leave-one-position-out accuracy, or None for a bundle that is not a survey."""
    from models.survey_map import survey_map
    from training.figures.survey_plot import plot_survey_map

    survey = model.survey
    if survey is None or survey.areas is None or len(survey.positions) < 3:
        return None
    try:
        smap = survey_map(survey, method=model.primary_method)
    except InputError:  # positions on one line: no site to map
        return None
    plot_survey_map(path, smap, target_names=model.target_names)
    return smap.accuracy


def train_site(rows, name: str, config, args, out: Path) -> dict:
    """Train one model of a ``--split-by`` repository on ``rows``: its bundle to ``out/<name>``, its report to
    ``out/reports/<name>``; the repository manifest's entry for it."""
    from dataclasses import replace as with_

    from training.pipeline.served_volume import selection_line

    result, manifest = fit_and_write(rows, with_(config, progress=False), args, out / name, out / "reports" / name,
                                     StageMeter())
    method = result.model.primary_method
    return {"bundle_id": manifest["bundle_id"], "primary_method": method,
            "served": selection_line(result.model.selection), "coverage": result.model.coverage,
            "test_coverage": result.metrics.get(method, {}).get("coverage"),
            "test_volume": result.metrics.get(method, {}).get("volume"), "guarantee": result.calibration["guarantee"]}



def load_data(args):
    """The dataset the flags name, grouped by the ``--groups`` columns (``train()`` groups a survey by position
    when ``--groups`` is absent)."""
    group_cols = parse_groups(args.groups, "--groups")
    group_cols = group_cols if isinstance(group_cols, list) else None
    if args.csv is not None:
        if not args.targets:
            raise LMVEError("--csv needs --targets, e.g. --targets x,y")
        if args.features and args.also_features:
            raise LMVEError("--also-features adds to the features the default infers; with --features every "
                            "feature is named: give one of them")
        labels = [*(args.calibrate_across or ()), *([args.split_by] if args.split_by else []),
                  *(c for c in (args.building_column, args.floor_column) if c), *(args.meta or ())]
        dataset = load_csv(args.csv, args.targets, args.features, groups=group_cols,
                           centre_columns=args.centre_columns, meta_columns=list(dict.fromkeys(labels)) or None,
                           also_features=args.also_features)
        if dataset.left_out:
            print(f"lmve-train: {len(dataset.left_out)} column(s) left out of the features, kept with each row: "
                  + "; ".join(f"{c} ({why})" for c, why in dataset.left_out.items())
                  + ". --also-features COL takes one back; --features names every feature")
    else:
        if args.targets or args.features or args.centre_columns or args.meta or args.also_features:
            raise LMVEError("--targets/--features/--meta/--also-features/--centre-columns go with --csv")
        dataset = load_dataset(args.dataset or "synthetic", args.data_dir, n_samples=args.n_samples, seed=args.seed,
                               groups=group_cols)
    return dataset


def grouping_line(result, config) -> str | None:
    """The terminal's line when ``train()`` grouped a survey by position itself; None otherwise."""
    grouping = result.dataset.grouping or {}
    if not grouping.get("automatic"):
        return None
    share = 100 * share_of_repeated_positions(result.dataset.Y)
    if config.calibrate_across:
        return (f"{share:.0f} % of the rows share their position with another row (a survey); across "
                f"{','.join(config.calibrate_across)} units each unit is scored by models that never saw it, at the "
                "survey's positions (--groups with the position columns holds positions out too)")
    return (f"{share:.0f} % of the rows share their position with another row (a survey): grouped by position "
            f"({grouping['n_groups']} positions). Test and calibration hold whole positions, so the guarantee is "
            "for readings at positions not in the survey. --groups none keeps the row protocol.")
