"""What a run states in its bundle beside the model (:func:`record_stage`, the last stage of
:func:`training.pipeline.train`): the guarantee in words and as fields (:func:`guarantee`), the survey's scale
and survey-size estimate, the training record, the targets' CRS and the survey the viewer shows. Whoever calls
``train()`` (``lmve-train``, a notebook, a benchmark) writes the same bundle with
:meth:`training.pipeline.run.TrainResult.save`."""

from __future__ import annotations

import numpy as np

from models.calibration.conformal import APPROXIMATE_RULES, guarantee_terms, guarantee_words
from training.calibration.cross_fit import cross_fit_guarantee
from training.pipeline.run import TrainState


def record_stage(s: TrainState) -> None:
    """``s.calibration`` (the guarantee, the scale), ``s.training`` (the run's record), and the model's CRS and
    survey (stage ``scale`` for the scale)."""
    from training.data.site import survey_of
    from training.figures.survey_scale import is_survey, served_areas, survey_scale
    from training.pipeline.floors import floor_labels

    model, config = s.model, s.config
    s.calibration = guarantee(s)
    if s.site_weights:
        w = s.site_weights
        s.calibration["weights"] = w
        s.calibration["guarantee"] += (f"; each of the {w['positions']} calibration positions weighted by the share of "
                                       f"the site nearest it ({w['extent']}; {w['effective_positions']:.1f} effective "
                                       "positions): for a reading at a position uniform over the site, approximate")
        s.calibration["terms"].update(holds_for="a reading at a position uniform over the site", form="approximate",
                                      bound=None, bound_of=None)
        s.calibration["exact"] = False
    with s.meter.stage("scale"):
        areas = served_areas(model, s.dataset, seed=config.seed) if is_survey(s.dataset) else None
        scale = survey_scale(model, s.dataset, seed=config.seed, size=s.survey_size, areas=areas)
    if scale:
        s.calibration["scale"] = scale
    if model.floors is not None:
        what = " and ".join(model.floors.labels.columns)
        s.calibration["guarantee"] = (f"jointly with the {what}: {s.calibration['guarantee']}, for the true {what} "
                                      "in the floor set and the true position in the ellipse together")
        s.calibration["terms"]["holds_for"] += f", its true {what} in the floor set and position in the ellipse"
    pre = model.preprocess
    s.training = {"seed": config.seed, "coverage": config.coverage,
                  "cross_fit": s.centre_info.get("cross_fit", config.resolved_cross_fit(config.grouped(s.dataset))),
                  "centre": s.centre_info, "preprocess": pre.describe() if pre is not None else "none",
                  "rows": {"train": len(s.split.train), "calibration": len(s.split.calibration),
                           "test": len(s.split.test)}}
    codes = None if s.floor_classes is None else floor_labels(s.dataset, config.floor_column,
                                                              config.building_column)[1]
    model.crs = s.crs
    model.radio_map = radio_map_of(s)
    model.survey = survey_of(s.dataset, s.split, codes, seed=config.seed, **_position_figures(s, areas))


def radio_map_of(s: TrainState):
    """The survey's reference and calibration rows as read (:class:`models.radio_map.RadioMap`), for a model whose
    features hold RSSI readings (at least two); ``None`` otherwise, or for the client's own centres. Reference
    and calibration rows stay apart where the bundle's are (a split bundle), so that its re-scored calibration
    keeps the exact form."""
    from models.radio_map import RadioMap

    model = s.model
    if model.readings is None or model.readings.n_rssi < 2 or s.dataset.centers is not None:
        return None
    m, split = len(s.dataset.X), s.split
    reference, calibration = np.zeros(m, bool), np.zeros(m, bool)
    reference[split.train] = True
    calibration[split.calibration] = True
    # the test part, held out of every fit, calibrates too; where the calibration rows are the training rows
    # (cross-fit, scored leave-unit-out anyway) it is searched as well
    calibration[split.test] = True
    if reference[split.calibration].any():
        reference[split.test] = True
    # training's fingerprint search (where it ran) is what replaces a centre that cannot leave a column out
    searched = s.config.centre_context.get("fingerprint")
    return RadioMap.of(s.dataset.X, s.dataset.Y, s.groups, reference, calibration, seed=s.config.seed, knn=searched)


def _position_figures(s: TrainState, areas) -> dict:
    """Each row's served area (where :func:`served_areas` predicted it) and honest centre error (the calibration
    rows': their centres never saw their positions), NaN elsewhere: what the survey map reads. Empty unless a
    survey."""
    if areas is None:
        return {}
    import numpy as np

    area, error = np.full(len(s.Y), np.nan), np.full(len(s.Y), np.nan)
    area[areas[0]] = areas[1]
    cal = np.asarray(s.split.calibration)
    error[cal] = np.linalg.norm(s.Y[cal] - s.centers[cal], axis=1)
    return {"areas": area, "errors": error}


def guarantee(s: TrainState) -> dict:
    """The grouping and what the calibrated level guarantees (for the manifest and report): ``guarantee`` in
    words, and ``terms``, the same as fields (:func:`models.calibration.conformal.guarantee_terms`), which
    ``GET /model`` serves as its top-level ``guarantee``."""
    cal = next(iter(s.model.methods.values())).calibrator_
    eta, grouped, dataset = s.model.coverage, s.config.grouped(s.dataset), s.dataset
    across = s.split.across
    terms = {"level": eta, "rule": cal.rule, "n_rows": int(cal.n_rows_)}
    if across:
        return _across(across, cal, terms, dataset.grouping if grouped else None)
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
    cross = s.split.cross_fit
    if cross:
        return {"grouping": g, "n_groups": cal.n_calibration_, "mode": "cross-fit", "exact": False,
                "mode_why": cross["why"], "bound": {"cross_fit": 1 - 2 * (1 - eta), "split": eta},
                "guarantee": cross_fit_guarantee(eta, unit, cal.n_calibration_, cal.n_rows_,
                                                 s.centre_info.get("cross_fit", 0),
                                                 s.centre_info.get("centre_folds", 0)),
                "terms": guarantee_terms(**terms, exact=False, mode="cross-fit", holds_for=f"a {unit}", units=units,
                                         n_units=int(cal.n_calibration_), bound=1 - 2 * (1 - eta),
                                         bound_of="cross-conformal (CV+) relative of this form",
                                         why=cross["why"])}
    out = {"grouping": g, "n_groups": cal.n_calibration_, "mode": "split", "exact": cal.rule == "group-subsample",
           "guarantee": guarantee_words(eta, cal.rule, unit, cal.n_rows_, cal.n_calibration_),
           "terms": guarantee_terms(**terms, exact=cal.rule == "group-subsample", mode="split", holds_for=f"a {unit}",
                                    units=units, n_units=int(cal.n_calibration_))}
    if s.split.adjustment:
        out["split_adjustment"] = s.split.adjustment
    return out


def _across(across: dict, cal, terms: dict, grouping: dict | None) -> dict:
    """:func:`guarantee` calibrated across units (``training.calibration.across``)."""
    out = {"grouping": grouping, "across": across, "n_groups": cal.n_calibration_,
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
