"""A site whose radio changes after its survey, on the project's simulator (training.data.synthetic): what the
radio watch's tests (tests/models/test_radio_map.py, tests/service/test_radio.py) walk.

The survey hears beacons 0-11 (12-15 not yet installed); later, :data:`REPLACED` are taken down and 12-15 are on.
A phone reports a reading below :data:`SENSITIVITY_DB` as :data:`NOT_HEARD`, as UJIIndoorLoc's do."""

import numpy as np

from training.data.datasets import Dataset, group_by_position
from training.data.synthetic import make_new_positions, make_survey

BEACONS, LATER = 16, (12, 13, 14, 15)
REPLACED = (0, 3, 5, 9)
NOT_HEARD, SENSITIVITY_DB = 100.0, -95.0
SURVEY_SEED = 5


def read(X):
    """The simulator's readings as a phone reports them: below its sensitivity, not detected."""
    return np.where(X < SENSITIVITY_DB, NOT_HEARD, X)


def site_rows(X):
    X = X.copy()
    X[:, list(LATER)] = NOT_HEARD
    return X


def survey() -> Dataset:
    """The survey: 60 positions, 10 readings each, grouped by position."""
    X, Y, _, _, fn, tn = make_survey(n_points=60, readings=10, n_beacons=BEACONS, seed=SURVEY_SEED)
    return group_by_position(Dataset("site", site_rows(read(X)), Y, fn, tn, "-"), auto=True)


def train_site():
    """A split-calibrated bundle of :func:`survey` (GE and the ball, the RSSI step on, as lmve-train's):
    ``(TrainResult, Dataset)``."""
    from training.pipeline import TrainConfig, train

    ds = survey()
    return train(ds, TrainConfig(seed=0, methods=("ge", "ball"), calibration_mode="split", rssi="auto",
                                 progress=False)), ds


def walk(n_points, seed, replaced=(), offset_db=0.0):
    """Readings at new positions (5 each): ``replaced`` beacons off, 12-15 on once any is replaced, every
    reading ``offset_db`` off. Returns ``(X, Y)``."""
    X, Y, _, _ = make_new_positions(n_points=n_points, readings=5, n_beacons=BEACONS, survey_seed=SURVEY_SEED,
                                    seed=seed)
    X = read(X + offset_db)
    if not replaced:
        X = site_rows(X)
    X[:, list(replaced)] = NOT_HEARD
    return X, Y


def saved_site(folder):
    """:func:`train_site`'s bundle written under ``folder``: its path."""
    result, _ = train_site()
    path = folder / "site"
    result.save(path)
    return path
