"""The work of ``lmve-train`` under its printing: load the data its flags name, train, write the bundle and
the report; one model of a ``--split-by`` repository (:func:`train_site`), which the local and the Dask
engine both call."""

from __future__ import annotations

from pathlib import Path

from models.calibration.conformal import APPROXIMATE_RULES, guarantee_terms, guarantee_words
from models.calibration.recalibration import REPEATED_SHARE, share_of_repeated_positions
from models.exceptions import InputError, LMVEError
from training.commands.train_args import csv_list
from training.data.datasets import group_by_position, load_csv, load_dataset, with_groups
from training.pipeline import train
from training.pipeline.meter import StageMeter


def fit_and_write(dataset, config, args, bundle: Path, report: Path, meter: StageMeter):
    """Train on ``dataset``, write the bundle to ``bundle`` and the report and plot under ``report``;
    ``(result, manifest, calibration, training)``."""
    from models.bundle import save_bundle
    from training.commands.train_report import plot_test_regions, write_report
    from training.figures.survey_scale import survey_scale

    result = train(dataset, config, meter=meter)
    grouped = config.grouped(dataset)
    pre = result.model.preprocess
    training = {"seed": args.seed, "coverage": args.coverage,
                "cross_fit": result.centre.get("cross_fit", config.resolved_cross_fit(grouped)),
                "centre": result.centre, "preprocess": pre.describe() if pre is not None else "none",
                "rows": {"train": len(result.split.train), "calibration": len(result.split.calibration),
                         "test": len(result.split.test)}}
    calibration = guarantee(dataset, result, grouped)
    with meter.stage("scale"):
        scale = survey_scale(result.model, dataset, seed=args.seed, size=result.survey_size)
    if scale:
        calibration["scale"] = scale
    _attach_survey(result, dataset, config, args)
    if result.model.floors is not None:
        what = " and ".join(result.model.floors.labels.columns)
        calibration["guarantee"] = (f"jointly with the {what}: {calibration['guarantee']}, for the true {what} in "
                                    "the floor set and the true position in the ellipse together")
        calibration["terms"]["holds_for"] += f", its true {what} in the floor set and position in the ellipse"
    with meter.stage("save bundle"):
        manifest = save_bundle(result.model, bundle, dataset=dataset.info, metrics=result.metrics,
                               training=training, calibration=calibration)
    held = result.held_out  # no test part (across units, cross-fit): each unit left out in turn
    test = result.split.test if held is None else held["rows"]
    report.mkdir(parents=True, exist_ok=True)
    with meter.stage("plot"):
        plot_test_regions(report / "test_regions.png", result.model, dataset.X[test], dataset.Y[test], seed=args.seed,
                          centers=None if dataset.centers is None else dataset.centers[test], extent=scale,
                          regions=None if held is None else {m: held[m] for m in result.model.served_methods})
    write_report(report, dataset.info, result.metrics, config.coverage, manifest, result.timings, meter.stages)
    return result, manifest, calibration, training



def _attach_survey(result, dataset, config, args) -> None:
    """The bundle's CRS and survey (the surveyed positions and held-out rows the viewer shows)."""
    from training.pipeline.floors import floor_labels
    from training.data.site import survey_of

    codes = None
    if result.model.floors is not None:
        codes = floor_labels(dataset, config.floor_column, config.building_column)[1]
    result.model.crs = getattr(args, "target_crs", None)
    result.model.survey = survey_of(dataset, result.split, codes, seed=args.seed)



def train_site(rows, name: str, config, args, out: Path) -> dict:
    """Train one model of a ``--split-by`` repository on ``rows``: its bundle to ``out/<name>``, its report to
    ``out/reports/<name>``; the repository manifest's entry for it."""
    from dataclasses import replace as with_

    from training.pipeline.served_volume import selection_line

    result, manifest, calibration, _ = fit_and_write(rows, with_(config, progress=False), args, out / name,
                                                      out / "reports" / name, StageMeter())
    method = result.model.primary_method
    return {"bundle_id": manifest["bundle_id"], "primary_method": method,
            "served": selection_line(result.model.selection), "coverage": result.model.coverage,
            "test_coverage": result.metrics.get(method, {}).get("coverage"),
            "test_volume": result.metrics.get(method, {}).get("volume"), "guarantee": calibration["guarantee"]}



def load_data(args):
    """The dataset the flags name, grouped by position when most rows share their position (a survey)."""
    group_cols = None if args.groups in (None, "none") else csv_list(args.groups)
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
        dataset = load_dataset(args.dataset or "synthetic", args.data_dir, n_samples=args.n_samples, seed=args.seed)
        if group_cols:
            dataset = _group_builtin(dataset, group_cols)
    if args.groups is None and dataset.groups is None:
        share = share_of_repeated_positions(dataset.Y)
        if share > REPEATED_SHARE:
            dataset = group_by_position(dataset, auto=True)
            if args.calibrate_across:
                print(f"lmve-train: {100 * share:.0f} % of the rows share their position with another row (a survey); "
                      f"across {','.join(args.calibrate_across)} units each unit is scored by models that never saw "
                      "it, at the survey's positions (--groups with the position columns holds positions out too)")
            else:
                print(f"lmve-train: {100 * share:.0f} % of the rows share their position with another row (a survey): "
                      f"grouping by position ({dataset.grouping['n_groups']} positions). Test and calibration hold "
                      "whole positions, so the guarantee is for readings at positions not in the survey. "
                      "--groups none keeps the row protocol.")
    return dataset



def _group_builtin(dataset, columns: list[str]):
    """Group a built-in dataset by its target names or its per-row metadata columns."""
    known = {**{name: dataset.Y[:, j] for j, name in enumerate(dataset.target_names)}, **dataset.meta}
    missing = [c for c in columns if c not in known]
    if missing:
        raise InputError(f"--groups names {', '.join(missing)}, which {dataset.name} does not have; it has "
                         f"{', '.join(known)}", field="--groups", expected=" | ".join(known),
                         received=", ".join(missing))
    by = "position" if set(columns) == set(dataset.target_names) else ", ".join(columns)
    return with_groups(dataset, {c: known[c] for c in columns}, by)



def guarantee(dataset, result, grouped: bool) -> dict:
    """The grouping and what the calibrated level guarantees (for the manifest and report): ``guarantee`` in
    words, and ``terms``, the same as fields (:func:`models.calibration.conformal.guarantee_terms`), which
    ``GET /model`` serves as its top-level ``guarantee``."""
    cal = next(iter(result.model.methods.values())).calibrator_
    eta = result.model.coverage
    across = result.split.across
    terms = {"level": eta, "rule": cal.rule, "n_rows": int(cal.n_rows_)}
    if across:
        out = {"grouping": dataset.grouping if grouped else None, "across": across, "n_groups": cal.n_calibration_,
               "guarantee": f"{across['guarantee']}; {cal.n_rows_} calibration rows"}
        exact = bool(across.get("exact")) and across["rule"] == cal.rule
        if across["rule"] != cal.rule:
            exact = cal.rule == "group-subsample" and across.get("mode") != "cross-fit"
            out["guarantee"] += (f". The rule asked for, {cal.rule}, replaced {across['rule']}: "
                                 f"{'exact' if exact else 'approximate'}")
        units = f"{','.join(across['columns'])} units"
        out["terms"] = guarantee_terms(**terms, exact=exact, mode=f"across {across.get('mode', 'held-out')}",
                                       holds_for=f"a reading from a new {','.join(across['columns'])} unit",
                                       units=units, n_units=int(cal.n_calibration_))
        return out
    if not grouped:
        return {"grouping": None, "guarantee": guarantee_words(eta, cal.rule, "new row drawn at random from the same "
                                                               "data", cal.n_rows_),
                "terms": guarantee_terms(**terms, exact=cal.rule not in APPROXIMATE_RULES, mode="split",
                                         holds_for="a new row drawn at random from the same data", units="rows",
                                         n_units=int(cal.n_rows_))}
    g = dataset.grouping
    unit = "reading at a position not in the survey" if g["by"] == "position" else f"row from a {g['by']} group " \
        "not in the training data"
    units = "positions" if g["by"] == "position" else f"{g['by']} groups"
    cross = result.split.cross_fit
    if cross:
        from training.calibration.cross_fit import guarantee_words as cross_fit_words

        return {"grouping": g, "n_groups": cal.n_calibration_, "mode": "cross-fit", "exact": False,
                "mode_why": cross["why"], "bound": {"cross_fit": 1 - 2 * (1 - eta), "split": eta},
                "guarantee": cross_fit_words(eta, unit, cal.n_calibration_, cal.n_rows_,
                                             result.centre.get("cross_fit", 0), result.centre.get("centre_folds", 0)),
                "terms": guarantee_terms(**terms, exact=False, mode="cross-fit", holds_for=f"a {unit}", units=units,
                                         n_units=int(cal.n_calibration_), bound=1 - 2 * (1 - eta),
                                         bound_of="cross-conformal (CV+) relative of this form",
                                         why=cross["why"])}
    out = {"grouping": g, "n_groups": cal.n_calibration_, "mode": "split", "exact": cal.rule == "group-subsample",
           "guarantee": guarantee_words(eta, cal.rule, unit, cal.n_rows_, cal.n_calibration_),
           "terms": guarantee_terms(**terms, exact=cal.rule == "group-subsample", mode="split", holds_for=f"a {unit}",
                                    units=units, n_units=int(cal.n_calibration_))}
    if result.split.adjustment:
        out["split_adjustment"] = result.split.adjustment
    return out
