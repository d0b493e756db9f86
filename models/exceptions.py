"""The project's exception tree.

Every error the library raises on purpose derives from :class:`LMVEError`, so a caller (the
CLI, the HTTP service) can tell "the user gave us something wrong" from "the program is
broken" with one ``except`` clause::

    LMVEError
    ├── InputError (also ValueError)        bad shapes, NaN/inf, out-of-range values
    │   ├── UnknownMethodError              a method the model does not have
    │   └── UnattainableCoverageError       a level the calibration scores cannot guarantee
    ├── NotFittedError (also sklearn's)     predict/conformalize called before fit
    └── BundleError                         a bundle on disk cannot be trusted or read

An :class:`InputError` carries its context: ``field`` (``"features[3]"``), ``expected``
(``"16 values"``) and ``received`` (``"15 values"``), so that a caller can report them without
checking the input again (the service turns them into problem+json).
"""

from __future__ import annotations

from sklearn.exceptions import NotFittedError as _SklearnNotFittedError


class LMVEError(Exception):
    """Base class for every error raised on purpose by lmve."""


class InputError(LMVEError, ValueError):
    """Input data or a parameter is not what was expected.

    Parameters
    ----------
    message : str
        What was wrong, in words.
    field : str, default=None
        Which input was wrong (``"features[3]"``).
    expected : str, default=None
        What was expected of it (``"16 values"``).
    received : str, default=None
        What came (``"15 values"``).
    """

    def __init__(self, message: str, *, field: str | None = None, expected: str | None = None,
                 received: str | None = None):
        super().__init__(message)
        self.field, self.expected, self.received = field, expected, received


class UnknownMethodError(InputError):
    """A method name the model does not serve."""


class UnattainableCoverageError(InputError):
    """A coverage level above ``m / (m + 1)``: no finite threshold guarantees it.

    Parameters
    ----------
    message : str
        What was asked and what the calibration attains.
    max_coverage : float
        The highest level the ``m`` calibration scores (or groups) attain.
    **context
        ``field``, ``expected`` and ``received``, as :class:`InputError`.
    """

    def __init__(self, message: str, *, max_coverage: float, **context):
        super().__init__(message, **context)
        self.max_coverage = max_coverage


class NotFittedError(LMVEError, _SklearnNotFittedError):
    """An estimator was used before ``fit`` (or a calibrator before ``conformalize``)."""


class BundleError(LMVEError):
    """A calibrated bundle is missing, tampered with, of an unknown schema, or unreadable.

    Parameters
    ----------
    message : str
        What is wrong with it.
    path : str, default=None
        The file (or directory) at fault.
    """

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path
