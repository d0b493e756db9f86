"""Each estimator's documented defaults (numpydoc ``name : type, default=value``) are the
signature's defaults. A default changed in one place only ships behaviour the docs do not
describe: ``LMVEShape.stop_on`` once said "volume" while the code still stopped on the loss."""

import ast
import inspect
import re

import pytest

from models.centres import SVRCentre
from models.predictor import SplitConformalRegressor
from models.shapes import EmpiricalCopulaBox, GaussianEllipsoid, LMVEShape, NearestNeighbourEllipsoid

ESTIMATORS = [SVRCentre, SplitConformalRegressor, EmpiricalCopulaBox, GaussianEllipsoid, LMVEShape,
              NearestNeighbourEllipsoid]
_DOC_LINE = re.compile(r"^ +(\w+) : .*?, default=(.+?)\s*$", re.MULTILINE)


def _documented_defaults(cls) -> dict[str, str]:
    return dict(_DOC_LINE.findall(cls.__doc__ or ""))


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_documented_defaults_match_the_signature(cls):
    documented = _documented_defaults(cls)
    signature = inspect.signature(cls.__init__).parameters
    assert documented or cls is GaussianEllipsoid, f"{cls.__name__} documents no defaults"
    for name, text in documented.items():
        assert name in signature, f"{cls.__name__} documents {name!r}, which __init__ does not take"
        try:
            expected = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            expected = text  # e.g. a class name; compared as text
        actual = signature[name].default
        assert actual == expected or repr(actual) == text, (
            f"{cls.__name__}.{name}: the docstring says default={text}, the signature has {actual!r}")


def test_the_check_catches_a_mismatch():
    class Bad:
        """Parameters
        ----------
        stop_on : {"loss", "volume"}, default="volume"
        """

        def __init__(self, stop_on="loss"):
            self.stop_on = stop_on

    with pytest.raises(AssertionError, match="default=\"volume\""):
        test_documented_defaults_match_the_signature(Bad)
