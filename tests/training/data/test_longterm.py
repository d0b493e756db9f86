"""The UJI long-term survey's loader (training.data.longterm), on the real files in LMVE_DATA_DIR."""

import numpy as np
import pytest

from models.exceptions import InputError
from training.data.datasets import load_dataset
from training.data.longterm import N_APS, NOT_DETECTED, load_sets


def test_the_survey_is_month_1s_fifteen_sets():
    ds = load_dataset("uji_longterm")
    assert ds.X.shape == (8640, N_APS) and ds.Y.shape == (8640, 2)
    assert ds.feature_names[0] == "WAP001" and ds.feature_names[-1] == f"WAP{N_APS}" and ds.target_names == ["x", "y"]
    assert len(np.unique(ds.meta["campaign"])) == 15 and set(ds.meta["phone"]) == {"S3"}
    heard = ds.X != NOT_DETECTED
    assert ds.X[heard].min() >= -100 and ds.X[heard].max() <= 0  # dBm, 100 the only code
    # 48 positions of 576-row sets: every set visits the same positions
    per_set = {s: {tuple(p) for p in ds.Y[ds.meta["set"] == s]} for s in range(1, 16)}
    assert all(v == per_set[1] for v in per_set.values())


def test_month_25_second_phone_and_timestamps():
    walks = load_sets(25, "tst", sets=[5, 6])
    assert list(np.unique(walks.meta["phone"][walks.meta["set"] == 6])) == ["A5"]
    assert list(np.unique(walks.meta["phone"][walks.meta["set"] == 5])) == ["S3"]
    t = walks.meta["TIMESTAMP"]
    assert t.dtype == np.int64 and 20180000000000000 < t.min() <= t.max() < 20190000000000000  # exact 17 digits
    assert set(np.unique(walks.meta["floor"])) <= {3, 5}


def test_bad_month_kind_and_missing_set():
    with pytest.raises(InputError, match="month must be 1 to 25"):
        load_sets(26)
    with pytest.raises(InputError, match="kind must be"):
        load_sets(2, "walk")
    with pytest.raises(InputError, match="is missing"):
        load_sets(2, "trn", sets=[9])
