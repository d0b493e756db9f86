"""What a run of :func:`training.pipeline.train` carries from stage to stage (:class:`TrainState`), and what
it returns (:class:`TrainResult`)."""

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
from training.pipeline.meter import StageMeter


@dataclass
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


@dataclass
class TrainState:
    """One run: the inputs and the plan checked before any fit, then what each stage adds.

    The plan: ``eta`` (the level), ``split``, ``mode`` (the calibration mode,
    :class:`training.calibration.modes.CalibrationMode`: each row's unit, ``groups``, and the calibration
    ``rule``), ``n_units`` (the train part's units), ``k`` (the shapes' out-of-fold folds, 0 for in-sample
    residuals) and ``floor_classes`` (``(labels, codes)`` with floors). The stages add the fitted ``preprocess``
    and ``scaler`` and the standardised rows ``Xs``; the ``centre``, every row's ``centers`` and ``centre_info``;
    a cross-fitted mode's ``unit_cross_fit``; the calibrated ``methods`` with their ``fold_figures`` (and,
    with no test part, their ``unit_folds``: each fold's shape and the calibration rows it scored); the
    ``model``; the test ``metrics`` (with no test part, the units' left out in turn, their regions in
    ``held_out``); each step's ``timings``; the targets' ``crs`` (checked in the plan) and the bundle's records
    ``calibration`` and ``training`` (training.pipeline.record).
    """

    dataset: Dataset
    config: TrainConfig
    meter: StageMeter
    eta: float
    split: Split
    mode: CalibrationMode
    n_units: int
    k: int
    floor_classes: tuple | None
    bar: Any = None
    preprocess: Any = None
    scaler: Any = None
    Xs: np.ndarray | None = None
    centre: Any = None
    centers: np.ndarray | None = None
    centre_info: dict = field(default_factory=dict)
    unit_cross_fit: Any = None
    unit_folds: dict = field(default_factory=dict)
    held_out: dict | None = None
    methods: dict = field(default_factory=dict)
    fold_figures: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    model: RegionModel | None = None
    metrics: dict = field(default_factory=dict)
    survey_size: dict | None = None
    site_weights: dict | None = None
    crs: Any = None
    calibration: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)

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
        """The train rows' units (``None`` for rows; the split and the units never change after the plan)."""
        return None if self.groups is None else np.asarray(self.groups)[self.split.train]

    def groups_of(self, rows: np.ndarray) -> np.ndarray | None:
        """The units of ``rows`` (``None`` for rows)."""
        return self.mode.units_of(rows)

    def result(self) -> TrainResult:
        return TrainResult(model=self.model, split=self.split, metrics=self.metrics, timings=self.timings,
                           centre=self.centre_info, stages=self.meter.stages,
                           survey_size=self.survey_size, held_out=self.held_out, dataset=self.dataset,
                           calibration=self.calibration, training=self.training)
