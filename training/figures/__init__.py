"""Regions against the truth: a labelled walk's coverage, errors and verdict (:mod:`~training.figures.walk`) and
the survey's scale (:mod:`~training.figures.survey_scale`)."""
