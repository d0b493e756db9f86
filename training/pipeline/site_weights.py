"""Calibration for the site (``calibrate_for="site"``): each calibration position weighted by its share of the site.

Conformal calibration over positions promises coverage for a reading at a new position drawn as the surveyed
ones were. A survey whose positions are not spread like its users breaks that: one extended by ``lmve-plan``
puts its new positions where the regions were large, near walls and in gaps, so its calibration positions are
harder than the site at large and its regions over-cover there. Weighting each calibration position by the
share of the site nearest it (its Voronoi cell within the site, :func:`models.survey_map.site_shares`) turns
the calibration into one for a position uniform over the site: weighted conformal calibration under covariate
shift (Tibshirani et al., 2019), the survey's density of positions estimated by the cells' areas, the new
position taken to weigh the mean (the level corrected by ``(m + 1) / m`` as with equal weights). Approximate:
the weights are estimated, and the effective number of positions (``1 / sum(w^2)``) is below ``m``.

The site is the surveyed positions' convex hull widened by half their spacing, or ``site_boundary``. Only for
surveys grouped by position with two targets. The held-out figures of a run without a test part (each unit
left out in turn) keep equal weights.
"""

from __future__ import annotations

import numpy as np

from models.exceptions import InputError


def site_weights_stage(p, fitted):
    """``(methods, record)``: with ``calibrate_for="site"``, the :class:`~training.pipeline.run.Methods` ``fitted``
    with every method's calibrator reweighed by its calibration positions' shares of the site
    (:meth:`models.calibration.conformal.SplitConformalCalibrator.reweighed`, on copies: ``fitted`` is not
    modified), and the record (``by``, ``extent``, ``positions``, ``effective_positions``, ``largest_share``);
    otherwise ``(fitted, None)``. ``p``: the run's :class:`~training.pipeline.run.Plan`."""
    if p.config.calibrate_for != "site":
        return fitted, None
    import copy
    from dataclasses import replace

    from models.survey_map import Extent, site_shares

    grouping = (p.dataset.grouping or {}).get("by")
    if grouping != "position" or p.Y.shape[1] != 2 or p.groups is None:
        raise InputError("calibrate_for='site' weighs a survey's positions: it needs rows grouped by position and "
                         f"two target coordinates; this run has {grouping or 'no'} grouping and {p.Y.shape[1]} "
                         "targets", field="calibrate_for", expected="a survey grouped by position, 2 targets",
                         received=f"{grouping or 'no'} grouping, {p.Y.shape[1]} targets")
    cal = np.asarray(p.split.calibration)
    labels, codes = np.unique(np.asarray(p.groups)[cal], return_inverse=True)
    codes = codes.ravel()
    counts = np.bincount(codes)
    positions = np.column_stack([np.bincount(codes, weights=p.Y[cal, j]) / counts for j in range(2)])
    surveyed = np.unique(p.Y[np.concatenate([p.split.train, cal])], axis=0)
    boundary = p.config.site_boundary
    extent = Extent.of_polygon(boundary) if boundary is not None else Extent.of_survey(surveyed)
    shares = site_shares(positions, extent)
    reweighed = {}
    for name, reg in fitted.fitted.items():
        if reg.calibrator_.n_calibration_ != len(labels):
            raise InputError(f"{name}'s calibration has {reg.calibrator_.n_calibration_} groups, the calibration "
                             f"rows {len(labels)} positions: site weights need one calibration group per position",
                             field="calibrate_for", expected="one group per position", received="site")
        reg = copy.copy(reg)
        reg.calibrator_ = copy.copy(reg.calibrator_).reweighed(shares)
        reg.alpha_q_ = reg.calibrator_.quantile(reg.coverage)  # the fitted level's threshold, now weighted
        reweighed[name] = reg
    record = {"by": "site", "extent": "the boundary given" if boundary is not None else
              "the surveyed positions' convex hull widened by half their spacing",
              "positions": int(len(labels)), "effective_positions": float(1.0 / np.sum(shares**2)),
              "largest_share": float(shares.max())}
    return replace(fitted, fitted=reweighed), record
