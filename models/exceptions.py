"""The project's exception tree.

Every error the library raises on purpose derives from :class:`LMVEError`, so a
caller (the CLI, the HTTP service) can tell "the user gave us something wrong"
from "the program is broken" with one ``except`` clause::

    LMVEError
    ├── InputError (also ValueError)      bad shapes, NaN/inf, out-of-range values
    ├── NotFittedError (also sklearn's)   predict/conformalize called before fit
    └── BundleError                       a bundle on disk cannot be trusted or read

Messages name the field, what was expected and what came, e.g.
``"X has 7 features, but GaussianEllipsoid was fitted with 8"``.
"""

from __future__ import annotations

from sklearn.exceptions import NotFittedError as _SklearnNotFittedError


class LMVEError(Exception):
    """Base class for every error raised on purpose by lmve."""


class InputError(LMVEError, ValueError):
    """Input data or a parameter is not what was expected."""


class NotFittedError(LMVEError, _SklearnNotFittedError):
    """An estimator was used before ``fit`` (or a calibrator before ``conformalize``)."""


class BundleError(LMVEError):
    """A calibrated bundle is missing, tampered with, of an unknown schema, or unreadable.

    ``path`` names the file (or directory) at fault.
    """

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path
