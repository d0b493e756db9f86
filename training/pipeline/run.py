"""What :func:`training.pipeline.train` decides before fitting (:class:`Plan`), what each stage returns (a frozen
record named for what it holds: :class:`Standardised`, :class:`Centres`, :class:`Methods`, :class:`Tested`,
:class:`Records`), and what the run returns (:class:`TrainResult`, gathering them). No stage writes another's
result: ``train()`` threads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from models.model import RegionModel
from training.calibration.modes import CalibrationMode
from training.calibration.splits import Split
from training.data.datasets import Dataset
from training.pipeline.config import TrainConfig


@dataclass(frozen=True)
class TrainResult:
    """What :func:`training.pipeline.train` returns.

    Attributes
    ----------
    model : RegionModel
        Conformalized: what :func:`models.bundle.save_bundle` writes.
    split : Split
        The rows of the train, calibration and test parts.
    metrics : dict
        Test figures: each method's coverage and volume, with the served method's evidence.
    timings : dict
        Seconds per step.
    """
    model: RegionModel
    split: Split
    metrics: dict
    timings: dict
    centre: dict = field(default_factory=dict)
    """The centre used, and with centre="auto" every candidate's cross-validated error."""
    stages: dict = field(default_factory=dict)
    """Wall seconds and peak resident MiB per stage (training.pipeline.meter.StageMeter)."""
    survey_size: dict | None = None
    """Survey-size guidance (training.pipeline.survey_size), None where it does not apply."""
    held_out: dict | None = None
    """With no test part (across units, cross-fit): ``rows`` and each method's regions there, each unit
    scored out of its fold (training.calibration.unit_holdout); None otherwise."""
    dataset: Dataset | None = None
    """The data as trained on: grouped by position when it came ungrouped and is a survey."""
    calibration: dict = field(default_factory=dict)
    """The manifest's ``calibration``: the grouping, the guarantee in words and as fields, the survey's scale
    (training.pipeline.record)."""
    training: dict = field(default_factory=dict)
    """The manifest's ``training``: seed, level, folds, the centre's record, the RSSI step, the parts' rows."""

    def save(self, path) -> dict:
        """Write the bundle with the run's records, as ``lmve-train`` does.

        Parameters
        ----------
        path : str or path-like
            The bundle directory (:func:`models.bundle.save_bundle`: written atomically, replaced if it exists).

        Returns
        -------
        dict
            The manifest written.
        """
        from models.bundle import save_bundle

        return save_bundle(self.model, path, dataset=self.dataset.info, metrics=self.metrics,
                           training=self.training, calibration=self.calibration)


@dataclass(frozen=True)
class Plan:
    """What a run was asked and decided before any fit (:func:`training.pipeline.stages.plan`); never changed after.

    Attributes
    ----------
    dataset : Dataset
        The data as trained on (grouped by position where it came ungrouped and is a survey).
    config : TrainConfig
        What was asked.
    eta : float
        The level, checked.
    split : Split
        The train, calibration and test rows.
    mode : CalibrationMode
        How the calibration rows are drawn and scored: each row's unit (``groups``) and the ``rule``.
    n_units : int
        The train part's units.
    k : int
        The shapes' out-of-fold folds as planned (0: in-sample residuals); the centre stage may raise it
        (:attr:`Centres.k`).
    floor_classes : tuple or None
        ``(labels, codes)`` with floors.
    crs : object
        The targets' CRS (``None``: none).
    """

    dataset: Dataset
    config: TrainConfig
    eta: float
    split: Split
    mode: CalibrationMode
    n_units: int
    k: int
    floor_classes: tuple | None
    crs: Any = None

    @property
    def Y(self) -> np.ndarray:
        return self.dataset.Y

    @property
    def groups(self) -> np.ndarray | None:
        """Each row's exchangeable unit (``None``: rows), the calibration mode's."""
        return self.mode.groups

    @property
    def rule(self) -> str:
        """The calibration rule, the calibration mode's."""
        return self.mode.rule

    @cached_property
    def train_groups(self) -> np.ndarray | None:
        """The train rows' units (``None`` for rows)."""
        return None if self.groups is None else np.asarray(self.groups)[self.split.train]

    def groups_of(self, rows: np.ndarray) -> np.ndarray | None:
        """The units of ``rows`` (``None`` for rows)."""
        return self.mode.units_of(rows)


@dataclass(frozen=True)
class Standardised:
    """The preprocess stage's result: the RSSI step (``None``: none) and the scaler, fitted on the train part, and
    every row through them (``Xs``, what the centres and shapes see)."""

    preprocess: Any
    scaler: Any
    Xs: np.ndarray


@dataclass(frozen=True)
class Centres:
    """The centre stage's result (:func:`training.pipeline.centre.centre_stage`).

    Attributes
    ----------
    centre : object
        The served centre, fitted on the train part.
    centers : ndarray of shape (m, n)
        Every row's centre: the train rows' out of fold where the shapes learn from out-of-fold residuals.
    info : dict
        The centre's record (name, how it was chosen, folds, the fingerprint search).
    k : int
        The shapes' folds (0: in-sample residuals).
    cross_fit : UnitCrossFit or None
        A cross-fitted mode's unit cross-fit of the centre.
    config : TrainConfig
        The plan's configuration with the fingerprint search's context: what every later fit uses.
    seconds : dict
        ``centre`` (the stage's wall time) and, where candidates were compared, ``centre_selection``.
    """

    centre: Any
    centers: np.ndarray
    info: dict
    k: int
    cross_fit: Any
    config: TrainConfig
    seconds: dict


@dataclass(frozen=True)
class Methods:
    """The methods stage's result: each method's calibrated regressor (``fitted``, in the configuration's order),
    a cross-fitted mode's fold figures of each ellipsoid method (``fold_figures``: ``(fold, scores, volumes)`` per
    fold) and, with no test part, each fold's shape and the calibration rows it scored (``unit_folds``), and each
    method's wall ``seconds``."""

    fitted: dict
    fold_figures: dict
    unit_folds: dict
    seconds: dict


@dataclass(frozen=True)
class Tested:
    """The test stage's result: each method's held-out figures (``metrics``), the centre's test error
    (``centre``), with no test part the regions of each unit left out in turn (``held_out``, with ``rows``), and
    with floors the floors' held-out figures (``floors``)."""

    metrics: dict
    centre: dict
    held_out: dict | None = None
    floors: dict | None = None


@dataclass(frozen=True)
class Records:
    """The record stage's result: the manifest's ``calibration`` and ``training``, and what the model carries of
    the survey (``radio_map``, ``survey``)."""

    calibration: dict
    training: dict
    radio_map: Any
    survey: Any
