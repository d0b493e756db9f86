"""models/centres/errors.py: the centre's criteria, over rows or with each unit weighing the same."""

import numpy as np
import pytest

from models.centres.errors import criterion, unit_codes


def test_over_rows_the_criteria_are_the_plain_rmse_and_quantile():
    e = np.array([3.0, 4.0, 0.0, 12.0])
    assert criterion(e, "rmse") == pytest.approx(np.sqrt((9 + 16 + 144) / 4), rel=1e-15)
    assert criterion(e, "quantile", 0.5) == pytest.approx(3.5, rel=1e-15)


def test_with_units_the_rmse_is_each_units_averaged_and_the_quantile_weighs_units_the_same():
    # unit "a": 3 rows of error 1; unit "b": 1 row of error 10
    e = np.array([1.0, 1.0, 10.0, 1.0])
    codes, sizes = unit_codes(np.array(["a", "a", "b", "a"]))
    assert codes.tolist() == [0, 0, 1, 0] and sizes.tolist() == [3, 1]
    assert criterion(e, "rmse", codes=codes) == pytest.approx((1.0 + 10.0) / 2, rel=1e-15)
    # weights 1/6 for each row of a, 1/2 for b's: the half of the weight is reached at a's rows, beyond at b's
    assert criterion(e, "quantile", 0.5, codes) == 1.0
    assert criterion(e, "quantile", 0.51, codes) == 10.0
    # over the rows, the 0.51 quantile stays among a's errors
    assert criterion(e, "quantile", 0.51) == 1.0


def test_a_unit_with_no_row_counts_for_nothing():
    e = np.array([2.0, 4.0])
    assert criterion(e, "rmse", codes=np.array([0, 2]), sizes=np.array([1, 0, 1])) == pytest.approx(3.0, rel=1e-15)
