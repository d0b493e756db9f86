"""Survey-size guidance: what surveying half or twice as many positions would do to the served regions.

An estimate by subsampling, labelled as one wherever it is shown. The train part's positions are cut
in two halves; a centre (the run's chosen one) and the served method's shape fitted on one half score
every reading of the other, both ways round, so each surveyed position gets a score from a model that
learned from half the survey. The calibrated area at those scores (the mean region at their
``eta``-quantile) against the same figure at the run's own scores (its residuals about centres that
never saw the position: the calibration's, or the out-of-fold ones of the cross-fit) gives how the area
grows when the positions halve. Area falls about as a power of the number of positions (the centre's
error and the shapes' spread shrink together); the exponent ``b`` of that power law through the two
points puts the served area at ``2^b`` times itself with half the positions and ``2^-b`` with twice.
The doubling is an extrapolation and the halving a refit on half a survey of the same site: both
assume the new positions are like the surveyed ones, and neither counts the calibration's own gain
from more groups (small under cross-fit, where every position calibrates).
"""

from __future__ import annotations

from functools import partial

import numpy as np

#: fewer train positions than this: no estimate (a half of 3 positions says nothing about a survey)
MIN_POSITIONS = 8
#: above this many train rows the halves split a random subset of whole positions holding about this many rows,
#: so that the estimate's four fits cost what they cost on a survey of this size
MAX_ROWS = 16384


def survey_size(p, x, c, fitted, model) -> dict | None:
    """``{"estimate": "subsampling", "positions", "exponent", "half_factor", "twice_factor", ...}`` for a
    survey run (its :class:`~training.pipeline.run.Plan`, :class:`~training.pipeline.run.Standardised`,
    :class:`~training.pipeline.run.Centres` and :class:`~training.pipeline.run.Methods`, and the ``model`` after the
    served choice); ``{"estimate": None, "why"}``
    when the served shape cannot be fitted on half the survey; None where it does not apply: rows not grouped by position, floors, ``--calibrate-across``, the client's own centres, a served
    method that is not an ellipsoid, or fewer than :data:`MIN_POSITIONS` train positions."""
    from models import registry
    from models.exceptions import InputError
    from training.calibration.across import UnitCrossFit, fold_regressor
    from training.pipeline.served_volume import pooled_figures, unit_figures

    ds, config = p.dataset, c.config
    name = model.primary_method
    if ((ds.grouping or {}).get("by") != "position" or p.floor_classes is not None or p.mode.across
            or ds.centers is not None or registry.METHODS[name].kind != "ellipsoid" or p.groups is None):
        return None
    train, units = p.split.train, np.asarray(p.groups)
    n_pos = len(np.unique(units[train]))
    if n_pos < MIN_POSITIONS:
        return None
    reg = fitted.fitted[name]
    centre_name = c.info["name"]
    train, n_half = halved_positions(train, units, config.seed)
    halves = UnitCrossFit(k=2, seed=config.seed, centre_k=2).fit(lambda: config.make_centre(centre_name), x.Xs, p.Y,
                                                                 train, train, units)
    figures: list[tuple[np.ndarray, np.ndarray]] = []

    def keep(shape, fold, scored):
        rows = train[fold]
        figures.append(unit_figures(shape, x.Xs[rows], p.Y[rows] - halves.train_centres_[fold], p.eta))

    try:
        halves.scores(partial(fold_regressor, config, name, reg.shape_, reg.centre_, p.eta, p.rule), x.Xs, p.Y,
                      train, train, units, on_fold=keep)
    except InputError as exc:  # the served shape cannot learn from half the survey (LMVE below its row minimum)
        return {"estimate": None, "method": name, "positions": int(n_pos),
                "why": f"{name} cannot be fitted on half the survey: {exc}"}
    half = pooled_figures(np.concatenate([f[0] for f in figures]), np.concatenate([f[1] for f in figures]), p.eta,
                          p.Y.shape[1])["quantile_volume"]
    rows = p.split.calibration
    now = pooled_figures(*unit_figures(reg.shape_, x.Xs[rows], p.Y[rows] - c.centers[rows], p.eta), p.eta,
                         p.Y.shape[1])["quantile_volume"]
    folds = c.info.get("centre_folds") or 0
    seen = n_pos * (folds - 1) / folds if p.mode.cross_fitted and folds >= 2 else n_pos  # positions the scores' centres saw
    if not (np.isfinite(half) and np.isfinite(now) and now > 0 and seen > n_half):
        return None
    b = max(0.0, float(np.log(half / now) / np.log(seen / n_half)))
    sub = len(np.unique(units[train]))
    return {"estimate": "subsampling", "method": name, "positions": int(n_pos), "exponent": b,
            "half_factor": 2.0**b, "twice_factor": 2.0**-b, "half_area_ratio_measured": float(half / now),
            "positions_halved": int(sub),
            "how": ("a centre and the served shape refitted on each half of the train part's positions score the "
                    if sub == n_pos else f"a centre and the served shape refitted on each half of {sub} of the train "
                    f"part's {n_pos} positions (drawn at random, about {MAX_ROWS} rows) score the ")
                   + "other half; the area at those scores against the run's own gives the power law's exponent "
                     "(twice: extrapolated on it)"}


def halved_positions(train: np.ndarray, units: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    """The train rows the halves split, and how many positions a half holds: every train row, or above
    :data:`MAX_ROWS` rows the rows of a seeded random subset of whole positions holding about that many
    (the power law is then fitted between half of that subset and the whole survey)."""
    if len(train) <= MAX_ROWS:
        return train, len(np.unique(units[train])) / 2
    positions, counts = np.unique(units[train], return_counts=True)
    order = np.random.default_rng(seed).permutation(len(positions))
    take = order[:max(MIN_POSITIONS, int(np.searchsorted(np.cumsum(counts[order]), MAX_ROWS)) + 1)]
    chosen = positions[np.sort(take)]
    return train[np.isin(units[train], chosen)], len(chosen) / 2
