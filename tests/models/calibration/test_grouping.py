import numpy as np
import pytest

from models.calibration.grouping import AUTO, REPEATED_SHARE, parse_groups, position_codes, share_of_repeated_positions
from models.exceptions import InputError


def test_a_survey_is_rows_that_mostly_repeat_their_position_and_each_position_is_one_group():
    points = np.array([[0.0, 1.0], [0.0, 1.0], [2.0, 0.5], [2.0, 0.5], [2.0, 0.5], [9.0, 9.0]])
    assert share_of_repeated_positions(points) == pytest.approx(5 / 6)
    codes = position_codes(points)
    assert codes.tolist() == [0, 0, 1, 1, 1, 2]  # sorted positions' order
    assert position_codes(points[::-1]).tolist() == [2, 1, 1, 1, 0, 0]


def test_rows_at_half_repeated_positions_are_not_a_survey():
    # exactly REPEATED_SHARE of the rows repeat a position: the boundary stays rows
    points = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    assert share_of_repeated_positions(points) == REPEATED_SHARE
    assert position_codes(points) is None
    assert share_of_repeated_positions([["a", "b"]]) == 0.0 and share_of_repeated_positions(np.zeros((0, 2))) == 0.0


@pytest.mark.parametrize("text, expected", [(None, AUTO), ("none", None), (" None ", None), ("a", ["a"]),
                                            ("a, b,", ["a", "b"])])
def test_a_groups_setting_is_auto_rows_or_columns(text, expected):
    assert parse_groups(text) == expected


def test_a_groups_setting_naming_no_column_is_refused_with_the_field():
    with pytest.raises(InputError, match="--groups names no column") as info:
        parse_groups(" , ", "--groups")
    assert info.value.field == "--groups" and info.value.received == "' , '"
