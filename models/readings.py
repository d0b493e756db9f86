"""What the survey saw of each feature: "not heard" for a ``null`` reading, and readings it never saw.

A client that did not hear an access point has nothing to send for it. :class:`ReadingRanges` is fitted on
the training rows' raw features and stored in the bundle; at query time (:meth:`ReadingRanges.check`):

* a missing value (``null`` in JSON, NaN in an array) in an **RSSI feature** means "not heard": the bundle's
  not-detected code where the survey had one for that feature (:class:`models.preprocessing.RSSIFloor`
  then maps it as it maps the code), else, for a survey that never missed a reading of it, a value
  :data:`~models.preprocessing.FLOOR_MARGIN_DB` below the weakest reading the survey saw for it (said in
  the answer's warnings). A missing value in a feature that is not RSSI is refused, naming the feature;
* a reading outside what the survey ever saw for an RSSI feature (stronger than its strongest, a feature
  the survey never heard, or a value outside the readings' range that is not the survey's not-detected
  code) is named in the answer's warnings, or refused with ``strict`` (``LMVE_STRICT_INPUTS``).

A feature is RSSI when it is one of the RSSI step's columns, or, for a survey without not-detected codes,
when every training value lies in :data:`~models.preprocessing.READING_RANGE` and at least two features do.
"""

from __future__ import annotations

import numba
import numpy as np

from models.exceptions import InputError
from models.preprocessing import FLOOR_MARGIN_DB, READING_RANGE

#: features a warning or an error lists by name, at most
LISTED = 5


@numba.njit(cache=True, nogil=True)
def _as_surveyed(X, mid, half, code):
    """Whether every value of the rows ``X`` lies in its feature's band ``|x - mid| <= half`` or is its
    not-detected ``code`` (NaN fails both). One pass that stops at the first other value: compiled because
    a fingerprint's codes fail numpy's one-pass band test, and the several passes after it cost more than
    the model's centre search on a 520-feature survey."""
    for i in range(X.shape[0]):
        other = False
        for j in range(X.shape[1]):  # no branch inside a row: the loop vectorises
            v = X[i, j]
            other |= (not abs(v - mid[j]) <= half[j]) & (v != code[j])
        if other:
            return False
    return True


class ReadingRanges:
    """Per feature: RSSI or not, the weakest and strongest reading the training rows hold, the not-detected
    code, and what a missing value becomes.

    Parameters
    ----------
    min_columns : int, default=2
        Without an RSSI step, the fewest features in the readings' range that make a fingerprint.

    Attributes
    ----------
    rssi_ : (d,) bool
    low_, high_ : (d,) float
        The weakest and strongest real reading of each feature on the training rows (NaN: never heard;
        non-RSSI features: their minimum and maximum).
    code_ : (d,) float
        The not-detected code of each RSSI feature of the RSSI step (NaN elsewhere).
    unheard_ : (d,) float
        What a missing value becomes: the code, ``low_ - FLOOR_MARGIN_DB``, or NaN (refused: not RSSI).
    """

    def __init__(self, min_columns: int = 2):
        self.min_columns = min_columns

    def fit(self, X: np.ndarray, rssi=None) -> "ReadingRanges":
        """Learn the ranges of the raw training rows ``X`` (N, d); ``rssi``: the model's fitted
        :class:`~models.preprocessing.RSSIFloor` (None: one is fitted here to find the not-detected codes, which
        the rows hold whether or not the model maps them)."""
        X = np.asarray(X, dtype=np.float64)
        if rssi is None:
            from models.preprocessing import RSSIFloor

            rssi = RSSIFloor().fit(X)
        d = X.shape[1]
        lo, hi = READING_RANGE
        coded = np.zeros(d, dtype=bool)
        code = np.full(d, np.nan)
        if rssi is not None and rssi.active and rssi.code_ is not None:
            coded[rssi.columns_] = True
            code[rssi.columns_] = rssi.code_
        in_range = ((X >= lo) & (X <= hi)).all(axis=0)
        plain = in_range & ~coded
        self.rssi_ = coded | (plain if coded.any() or plain.sum() >= self.min_columns else np.zeros(d, dtype=bool))
        real = (X >= lo) & (X <= hi) | ~self.rssi_[None, :]
        with np.errstate(invalid="ignore"):
            self.low_ = np.where(real.any(axis=0), np.where(real, X, np.inf).min(axis=0), np.nan)
            self.high_ = np.where(real.any(axis=0), np.where(real, X, -np.inf).max(axis=0), np.nan)
        self.code_ = code
        self.unheard_ = np.where(coded, code, np.where(self.rssi_, np.floor(self.low_ - FLOOR_MARGIN_DB), np.nan))
        self.unheard_[self.rssi_ & ~coded & np.isnan(self.low_)] = lo - FLOOR_MARGIN_DB
        self._prepare()
        return self

    def _prepare(self) -> None:
        """The bounds :meth:`check` compares a whole batch against at once."""
        self._above = np.where(self.rssi_, np.nan_to_num(self.high_, nan=-np.inf), np.inf)
        self._below = np.where(self.rssi_, READING_RANGE[0], -np.inf)
        # one band per feature, |x - mid| <= half, for the common case in one pass (NaN fails it too):
        # RSSI features [-120, strongest] (none for one never heard: half < 0), the others everything
        heard = np.isfinite(self._above)
        top = np.where(heard, self._above, READING_RANGE[0])
        self._mid = np.where(self.rssi_, (top + READING_RANGE[0]) / 2, 0.0)
        self._half = np.where(self.rssi_, np.where(heard, (top - READING_RANGE[0]) / 2, -1.0), np.inf)

    def check(self, X: np.ndarray, names: list[str], strict: bool = False,
              field: str = "features") -> tuple[np.ndarray, list[str]]:
        """``(X, warnings)``: the rows ``X`` (float64, NaN for a missing value; changed in place) with every
        missing value replaced as the module says, and the warnings in words. Raises :class:`InputError`
        naming the feature for a missing value that is not RSSI, and with ``strict`` for a reading outside
        what the survey saw."""
        warnings: list[str] = []
        if _as_surveyed(X, self._mid, self._half, self.code_):  # every value as the survey saw it: nothing to do
            return X, warnings
        missing = np.isnan(X)
        if missing.any():
            self._fill(X, missing, names, field, warnings)
        with np.errstate(invalid="ignore"):
            odd = (X > self._above) | (X < self._below)
        if odd.any():
            odd &= ~(X == self.code_)  # the survey's own code is what it is
            if odd.any():
                self._unseen(X, odd, names, strict, field, warnings)
        return X, warnings

    def _fill(self, X, missing, names, field, warnings) -> None:
        cols = np.flatnonzero(missing.any(axis=0))
        refused = [j for j in cols if np.isnan(self.unheard_[j])]
        if refused:
            j = refused[0]
            i = int(np.flatnonzero(missing[:, j])[0])
            raise InputError(f"{field}[{i}][{j}] ({names[j]}) is null: null means 'not heard', which only an RSSI "
                             f"feature can be; {names[j]} is not one (the survey's values of it run from "
                             f"{self.low_[j]:g} to {self.high_[j]:g}): send a number", field=f"{field}[{i}][{j}]",
                             expected=f"a number for {names[j]}", received="null")
        X[missing] = np.broadcast_to(self.unheard_, X.shape)[missing]
        guessed = [j for j in cols if np.isnan(self.code_[j])]
        if guessed:
            listed = ", ".join(f"{names[j]} -> {self.unheard_[j]:g}" for j in guessed[:LISTED])
            more = f" and {len(guessed) - LISTED} more" if len(guessed) > LISTED else ""
            warnings.append(f"null taken as not heard in {len(guessed)} feature(s) the survey never missed a "
                            f"reading of, each {FLOOR_MARGIN_DB:g} dB or more below the weakest reading it saw of that "
                            f"feature: {listed}{more}")

    def _unseen(self, X, odd, names, strict, field, warnings) -> None:
        cols = np.flatnonzero(odd.any(axis=0))
        words = []
        for j in cols[:LISTED]:
            i = int(np.flatnonzero(odd[:, j])[0])
            v = X[i, j]
            if not READING_RANGE[0] <= v <= READING_RANGE[1]:
                why = (f"{v:g} is outside the readings' range ({READING_RANGE[0]:g} to {READING_RANGE[1]:g} dBm) and "
                       + (f"is not the survey's not-detected code ({self.code_[j]:g})" if not np.isnan(self.code_[j])
                          else "the survey used no not-detected code for it") + "; send null for 'not heard'")
            elif np.isnan(self.high_[j]):
                why = f"{v:g} dBm, but the survey never heard {names[j]}"
            else:
                why = f"{v:g} dBm is stronger than any reading the survey saw of it ({self.high_[j]:g} dBm)"
            if strict:
                raise InputError(f"{field}[{i}][{j}] ({names[j]}): {why} (LMVE_STRICT_INPUTS refuses readings the "
                                 "survey never saw)", field=f"{field}[{i}][{j}]",
                                 expected=self.expected(j), received=f"{v:g}")
            rows = int(odd[:, j].sum())
            words.append(f"{names[j]} ({rows} row{'s' if rows > 1 else ''}, first row {i}): {why}")
        more = f"; and {len(cols) - LISTED} more feature(s)" if len(cols) > LISTED else ""
        warnings.append("readings outside what the survey saw, answered as sent: " + "; ".join(words) + more)

    def prepare(self) -> None:
        """Compile (or load from numba's cache) :meth:`check`'s loop, so that the first request does not."""
        _as_surveyed(np.zeros((1, len(self._mid))), self._mid, self._half, self.code_)

    def expected(self, j: int) -> str:
        """What feature ``j`` accepts without a warning, in words."""
        code = "" if np.isnan(self.code_[j]) else f", its not-detected code {self.code_[j]:g}"
        if np.isnan(self.high_[j]):
            return f"null or the not-detected code{code}"
        return f"a reading up to {self.high_[j]:g} dBm{code}, or null"

    @property
    def n_rssi(self) -> int:
        return int(self.rssi_.sum())

    def extended(self, X: np.ndarray) -> "ReadingRanges":
        """These ranges widened to hold the raw rows ``X`` (N, d) too (a re-survey's): each feature's weakest
        and strongest reading; which features are RSSI, their codes and what a missing value becomes are
        kept. This one is left untouched."""
        import copy

        X = np.asarray(X, dtype=np.float64)
        lo, hi = READING_RANGE
        real = (X >= lo) & (X <= hi) | ~self.rssi_[None, :]
        with np.errstate(invalid="ignore"):
            low = np.where(real.any(axis=0), np.where(real, X, np.inf).min(axis=0), np.nan)
            high = np.where(real.any(axis=0), np.where(real, X, -np.inf).max(axis=0), np.nan)
        out = copy.copy(self)
        out.low_, out.high_ = np.fmin(self.low_, low), np.fmax(self.high_, high)
        out._prepare()
        return out

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        return ({"min_columns": int(self.min_columns)},
                {"rssi": self.rssi_.astype(np.int8), "low": self.low_, "high": self.high_, "code": self.code_,
                 "unheard": self.unheard_})

    @classmethod
    def from_arrays(cls, params: dict, arrays) -> "ReadingRanges":
        out = cls(int(params.get("min_columns", 2)))
        out.rssi_ = np.asarray(arrays["rssi"]).astype(bool)
        for name in ("low", "high", "code", "unheard"):
            setattr(out, f"{name}_", np.asarray(arrays[name], dtype=np.float64))
        out._prepare()
        return out
