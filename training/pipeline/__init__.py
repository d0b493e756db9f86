"""Fitting: :func:`train` runs the paper's protocol as stages over one run (:mod:`training.pipeline.stages`),
from the configuration (:mod:`training.pipeline.config`) to the calibrated model, the served method and the
survey-size guidance. The calibration modes it calls are :mod:`training.calibration`'s."""

from training.pipeline.stages import (CRITERIA, METHODS, MIN_TEST_GROUPS, MIN_TRAIN_GROUPS, RSSIFloor, Split, TrainConfig, TrainResult, centre_errors, check_calibration_groups, default_split, evaluate, fit_preprocess, fit_typicality, group_split, groups_needed, out_of_fold_centers, paper_split, plan, region_metrics, standardise, train)

__all__ = ["CRITERIA", "METHODS", "MIN_TEST_GROUPS", "MIN_TRAIN_GROUPS", "RSSIFloor", "Split", "TrainConfig",
           "TrainResult", "centre_errors", "check_calibration_groups", "default_split", "evaluate", "fit_preprocess",
           "fit_typicality", "group_split", "groups_needed", "out_of_fold_centers", "paper_split", "plan",
           "region_metrics", "standardise", "train"]
