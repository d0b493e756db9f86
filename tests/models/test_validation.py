import numpy as np
import pytest

from models import geometry
from models._validation import all_finite, check_matrix
from models.exceptions import InputError


@pytest.mark.parametrize("values, expected", [
    ([1.0, -2.0, 3.5], True),
    ([1e308, 1e308, 1e308], True),  # a sum would overflow; every entry is finite
    ([1.0, np.nan], False),
    ([np.inf, -np.inf], False),  # inf - inf: the sum is nan
    ([-np.inf, 1.0], False),
    ([], True),
])
def test_all_finite_is_isfinite_all(values, expected):
    A = np.array(values, dtype=np.float64).reshape(1, -1)
    assert all_finite(A) is expected
    assert bool(np.isfinite(A).all()) is expected


def test_check_matrix_fast_path_accepts_huge_and_refuses_nan():
    huge = np.full((2, 3), 1e308)
    assert check_matrix(huge, "X", n_columns=3) is huge
    bad = huge.copy()
    bad[1, 2] = np.nan
    with pytest.raises(InputError, match=r"X contains NaN or inf \(first at row 1, column 2\)"):
        check_matrix(bad, "X", n_columns=3)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")  # the 1e200 shape
def test_spd_check_finds_one_bad_shape_in_a_batch():
    C = np.repeat(np.eye(2)[None], 5, axis=0)
    for bad in (np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([[np.nan, 0.0], [0.0, 1.0]]),
                np.array([[-1.0, 0.0], [0.0, -1.0]]), np.array([[1e200, 0.0], [0.0, 1e200]])):
        batch = C.copy()
        batch[3] = bad
        with pytest.raises(InputError, match="positive-definite"):
            geometry.ellipse_2d(batch)
    area, semi, angle = geometry.ellipse_2d(C)
    np.testing.assert_allclose(area, np.pi)
    np.testing.assert_allclose(semi, 1.0)


def test_is_positive_int_takes_numpy_integers_and_refuses_bools_floats_and_zero():
    from models._validation import is_positive_int

    assert [is_positive_int(v) for v in (1, np.int64(3), np.uint8(2))] == [True, True, True]
    assert not any(is_positive_int(v) for v in (0, -3, 12.5, 2.0, True, "4", None))
