"""training.commands.train_args: flags mapped to TrainConfig fields, and the fields' errors told as flags."""

import pytest

from models.exceptions import InputError
from training.commands.train_args import FLAGS, as_flag, build_parser, config_from_args
from training.pipeline import TrainConfig


def test_a_field_error_is_told_as_the_flag_that_sets_it():
    told = as_flag(InputError("primary_folds must be an integer >= 2; got 1", field="primary_folds",
                              expected="an integer >= 2", received="1"))
    assert str(told) == "--primary-folds must be an integer >= 2; got 1"
    assert (told.field, told.expected, told.received) == ("--primary-folds", "an integer >= 2", "1")
    prefixed = as_flag(InputError("unknown rule", field="calibration_mode"))
    assert str(prefixed) == "--calibration: unknown rule"


def test_every_underscored_field_in_the_message_is_told_as_its_flag_and_prose_is_left_alone():
    told = as_flag(InputError("crs: crs_axes and crs_scale describe a CRS; name it", field="crs"))
    assert str(told) == "--crs: --crs-axes and --crs-scale describe a CRS; name it"
    words = as_flag(InputError("methods: the centre and the primary method are fitted", field="methods"))
    assert str(words) == "--methods: the centre and the primary method are fitted"  # no underscore: prose
    assert as_flag(InputError("crs_scaled is not a field", field="methods")).args[0].startswith("--methods: crs_scaled")


def test_an_error_of_no_flag_is_left_as_it_is():
    exc = InputError("features[3] is NaN", field="features[3]")
    assert as_flag(exc) is exc


@pytest.mark.parametrize("field", sorted(FLAGS))
def test_every_flag_of_the_table_is_one_the_parser_takes_for_a_real_field(field):
    parser = build_parser("usage")
    assert FLAGS[field] in parser._option_string_actions
    assert hasattr(TrainConfig(), field)


def test_a_bad_setting_names_its_flag_before_any_data_is_read():
    args = build_parser("usage").parse_args(["--primary-folds", "1"])
    with pytest.raises(InputError, match="^--primary-folds must be"):
        config_from_args(args)
