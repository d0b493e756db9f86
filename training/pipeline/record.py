"""What a run states in its bundle beside the model (:func:`record_stage`, the last stage of
:func:`training.pipeline.train`): the guarantee in words and as fields (:func:`guarantee`), the survey's scale
and survey-size estimate, the training record, the targets' CRS and the survey the viewer shows. Whoever calls
``train()`` (``lmve-train``, a notebook, a benchmark) writes the same bundle with
:meth:`training.pipeline.run.TrainResult.save`."""

from __future__ import annotations

import numpy as np

from models.calibration.conformal import APPROXIMATE_RULES, guarantee_terms, guarantee_words
from training.calibration.cross_fit import cross_fit_guarantee
from training.pipeline.meter import StageMeter
from training.pipeline.run import Centres, Plan, Records


def record_stage(p: Plan, c: Centres, model, centre: dict, site_weights: dict | None,
                 size: dict | None, meter: StageMeter) -> Records:
    """The manifest's ``calibration`` (the guarantee, the site weights, the scale) and ``training`` (the run's record,
    with ``centre``, the centre's record with its test error), and the model's radio map and survey (stage
    ``scale`` for the scale). ``model``: the calibrated model, its floors and served choice set; ``size``: the
    survey-size guidance (:func:`training.pipeline.survey_size.survey_size`)."""
    from training.data.site import survey_of
    from training.figures.survey_scale import is_survey, served_areas, survey_scale
    from training.pipeline.floors import floor_labels

    config = p.config
    calibration = guarantee(p, model, centre)
    if site_weights:
        w = site_weights
        calibration["weights"] = w
        calibration["guarantee"] += (f"; each of the {w['positions']} calibration positions weighted by the share of "
                                     f"the site nearest it ({w['extent']}; {w['effective_positions']:.1f} effective "
                                     "positions): for a reading at a position uniform over the site, approximate")
        calibration["terms"].update(holds_for="a reading at a position uniform over the site", form="approximate",
                                    bound=None, bound_of=None)
        calibration["exact"] = False
    with meter.stage("scale"):
        areas = served_areas(model, p.dataset, seed=config.seed) if is_survey(p.dataset) else None
        scale = survey_scale(model, p.dataset, seed=config.seed, size=size, areas=areas)
    if scale:
        calibration["scale"] = scale
    if model.floors is not None:
        what = " and ".join(model.floors.labels.columns)
        calibration["guarantee"] = (f"jointly with the {what}: {calibration['guarantee']}, for the true {what} "
                                    "in the floor set and the true position in the ellipse together")
        calibration["terms"]["holds_for"] += f", its true {what} in the floor set and position in the ellipse"
    pre = model.preprocess
    training = {"seed": config.seed, "coverage": config.coverage,
                "cross_fit": centre.get("cross_fit", config.resolved_cross_fit(config.grouped(p.dataset))),
                "centre": centre, "preprocess": pre.describe() if pre is not None else "none",
                "rows": {"train": len(p.split.train), "calibration": len(p.split.calibration),
                         "test": len(p.split.test)}}
    codes = None if p.floor_classes is None else floor_labels(p.dataset, config.floor_column,
                                                              config.building_column)[1]
    survey = survey_of(p.dataset, p.split, codes, seed=config.seed, **_position_figures(p, c, areas))
    return Records(calibration=calibration, training=training, radio_map=radio_map_of(p, c, model), survey=survey)


def radio_map_of(p: Plan, c: Centres, model):
    """The survey's reference and calibration rows as read (:class:`models.radio_map.RadioMap`), for a model whose
    features hold RSSI readings (at least two); ``None`` otherwise, or for the client's own centres. Reference
    and calibration rows stay apart where the bundle's are (a split bundle), so that its re-scored calibration
    keeps the exact form."""
    from models.radio_map import RadioMap

    if model.readings is None or model.readings.n_rssi < 2 or p.dataset.centers is not None:
        return None
    m, split = len(p.dataset.X), p.split
    reference, calibration = np.zeros(m, bool), np.zeros(m, bool)
    reference[split.train] = True
    calibration[split.calibration] = True
    # the test part, held out of every fit, calibrates too; where the calibration rows are the training rows
    # (cross-fit, scored leave-unit-out anyway) it is searched as well
    calibration[split.test] = True
    if reference[split.calibration].any():
        reference[split.test] = True
    # training's fingerprint search (where it ran) is what replaces a centre that cannot leave a column out
    searched = c.config.centre_context.get("fingerprint")
    return RadioMap.of(p.dataset.X, p.dataset.Y, p.groups, reference, calibration, seed=p.config.seed, knn=searched)


def _position_figures(p: Plan, c: Centres, areas) -> dict:
    """Each row's served area (where :func:`training.figures.survey_scale.served_areas` predicted it) and honest
    centre error (the calibration rows': their centres never saw their positions), NaN elsewhere: what the survey
    map reads. Empty unless a survey."""
    if areas is None:
        return {}
    import numpy as np

    area, error = np.full(len(p.Y), np.nan), np.full(len(p.Y), np.nan)
    area[areas[0]] = areas[1]
    cal = np.asarray(p.split.calibration)
    error[cal] = np.linalg.norm(p.Y[cal] - c.centers[cal], axis=1)
    return {"areas": area, "errors": error}


def guarantee(p: Plan, model, centre: dict) -> dict:
    """The grouping and what the calibrated level guarantees (for the manifest and report): ``guarantee`` in
    words, and ``terms``, the same as fields (:func:`models.calibration.conformal.guarantee_terms`), which
    ``GET /model`` serves as its top-level ``guarantee``."""
    cal = next(iter(model.methods.values())).calibrator_
    eta, grouped, dataset = model.coverage, p.config.grouped(p.dataset), p.dataset
    across = p.split.across
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
    cross = p.split.cross_fit
    if cross:
        return {"grouping": g, "n_groups": cal.n_calibration_, "mode": "cross-fit", "exact": False,
                "mode_why": cross["why"], "bound": {"cross_fit": 1 - 2 * (1 - eta), "split": eta},
                "guarantee": cross_fit_guarantee(eta, unit, cal.n_calibration_, cal.n_rows_,
                                                 centre.get("cross_fit", 0),
                                                 centre.get("centre_folds", 0)),
                "terms": guarantee_terms(**terms, exact=False, mode="cross-fit", holds_for=f"a {unit}", units=units,
                                         n_units=int(cal.n_calibration_), bound=1 - 2 * (1 - eta),
                                         bound_of="cross-conformal (CV+) relative of this form",
                                         why=cross["why"])}
    out = {"grouping": g, "n_groups": cal.n_calibration_, "mode": "split", "exact": cal.rule == "group-subsample",
           "guarantee": guarantee_words(eta, cal.rule, unit, cal.n_rows_, cal.n_calibration_),
           "terms": guarantee_terms(**terms, exact=cal.rule == "group-subsample", mode="split", holds_for=f"a {unit}",
                                    units=units, n_units=int(cal.n_calibration_))}
    if p.split.adjustment:
        out["split_adjustment"] = p.split.adjustment
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
