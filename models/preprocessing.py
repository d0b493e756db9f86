"""Fingerprint preprocessing: "not detected" RSSI codes mapped to a floor below the weakest reading.

Radio surveys write a code where a transmitter was not heard (UJIIndoorLoc and many surveys +100,
ble_rssi -200). Left in place, the code says "not heard" with a value *stronger* than any real
reading (+100 dBm) or one far below it, and every distance, kernel and network sees a step that
is not in the radio's physics. :class:`RSSIFloor` finds the RSSI columns of the training rows and
maps their codes to one floor value a little below the weakest real reading. It is fitted on the
training rows, stored in the bundle, and applied to every row before the scaler, the centre and
the shapes see it, at training and at serving time alike.

Phones differ by gain and sensitivity: the same position reads a few dB stronger or weaker on
another phone, and its weakest transmitters are heard or not. The step's ``representation``
re-expresses the heard readings of a row (Torres-Sospedra et al., 2015, "Comprehensive analysis of
distance and similarity measures for Wi-Fi fingerprinting indoor positioning systems"):

- ``"dbm"``: the readings as they came (the floor for "not detected");
- ``"relative"``: each reading minus the row's strongest one, plus the training rows' median
  strongest reading (``reference_``), clipped to the training rows' reading range: a phone's offset
  cancels; a row's order and gaps stay;
- ``"powed"``: ``((x - floor) / -floor) ** e`` (0 for "not detected"): weak readings, the ones a
  less sensitive phone loses, count for less;
- ``"exponential"``: ``exp((x - floor) / 24) / exp(-floor / 24)``, the same idea, steeper.
"""

from __future__ import annotations

import numpy as np

from models._validation import check_matrix, lookup
from models.exceptions import InputError, NotFittedError

#: real RSSI readings lie in this range (dBm); values outside it in an RSSI column are "not detected" codes
READING_RANGE = (-120.0, 0.0)
#: without an explicit code, one value must make at least this share of a column's out-of-range values
SENTINEL_SHARE = 0.9
#: the automatic floor lies this many dB below the weakest real reading of the training rows
FLOOR_MARGIN_DB = 5.0
#: RSSIFloor.representation's choices (module docstring)
REPRESENTATIONS = ("dbm", "relative", "powed", "exponential")
#: the exponents of "powed" (beta) and "exponential" (alpha, dB), Torres-Sospedra et al.'s
POWED_BETA, EXPONENTIAL_ALPHA = float(np.e), 24.0
#: rows :meth:`RSSIFloor.transform` re-expresses at a time (a block's copies of the RSSI columns stay a few MiB)
BLOCK_ROWS = 4096


class RSSIFloor:
    """Map "not detected" codes in RSSI columns to a floor value (a fitted, stored step).

    A column is an RSSI column when each of its training values is either a reading in
    ``READING_RANGE`` (-120 to 0 dBm) or a not-detected code, and at least one row holds a code
    (without ``not_detected``: one value, the sentinel, makes at least 90 % of its codes);
    the step applies when at least ``min_columns`` columns qualify (one stray column is not a
    fingerprint). Codes are the values outside the reading range (``not_detected=None``), or
    exactly ``not_detected`` when given.

    Parameters
    ----------
    not_detected : float or None, default=None
        The code of a transmitter not heard; ``None``: any value outside the reading range.
    floor : float or None, default=None
        The value codes become; ``None``: ``FLOOR_MARGIN_DB`` below the weakest real reading.
        A given floor must lie below the weakest real reading.
    min_columns : int, default=2
    representation : {"dbm", "relative", "powed", "exponential"}, default="dbm"
        How the RSSI columns' readings reach the scaler (module docstring).

    Attributes
    ----------
    columns_ : ndarray of int
        The RSSI columns (empty: the step changes nothing).
    floor_ : float
    code_ : float or None
        The most frequent code on the training rows (reported), or ``not_detected``.
    weakest_ : float
        The weakest real reading on the training rows.
    reference_ : float
        The median of the training rows' strongest readings (rows that hear at least one transmitter):
        where ``"relative"`` puts each row's strongest reading.
    """

    def __init__(self, not_detected: float | None = None, floor: float | None = None, min_columns: int = 2,
                 representation: str = "dbm"):
        self.not_detected = not_detected
        self.floor = floor
        self.min_columns = min_columns
        self.representation = representation

    def _codes(self, X: np.ndarray) -> np.ndarray:
        if self.not_detected is None:
            lo, hi = READING_RANGE
            return (X < lo) | (X > hi)
        return X == self.not_detected

    def fit(self, X) -> "RSSIFloor":
        """Find the RSSI columns of training rows ``X`` and their floor (class docstring); rows are read a block
        of :data:`BLOCK_ROWS` at a time, so the working copies stay a block's size at any row count."""
        lookup(REPRESENTATIONS, self.representation, "rssi_representation")
        X = check_matrix(X, "X", owner="RSSIFloor.fit", min_rows=1)
        self.n_features_in_ = X.shape[1]
        lo, hi = READING_RANGE
        blocks = [slice(start, start + BLOCK_ROWS) for start in range(0, X.shape[0], BLOCK_ROWS)]
        valid, coded = np.ones(X.shape[1], dtype=bool), np.zeros(X.shape[1], dtype=bool)
        for rows in blocks:
            codes = self._codes(X[rows])
            valid &= np.all(((X[rows] >= lo) & (X[rows] <= hi)) | codes, axis=0)
            coded |= codes.any(axis=0)
        qualifies = valid & coded
        if self.not_detected is None:  # codes are a sentinel: one value makes most of them
            for j in np.flatnonzero(qualifies):
                _, counts = np.unique(X[self._codes(X[:, j]), j], return_counts=True)
                qualifies[j] = counts.max() >= SENTINEL_SHARE * counts.sum()
        columns = np.flatnonzero(qualifies)
        self.columns_ = columns if len(columns) >= self.min_columns else np.array([], dtype=int)
        weakest, code_counts, heard = self._scan(X, blocks)
        self.weakest_ = lo if weakest is None else weakest
        if self.floor is None:
            self.floor_ = float(np.floor(self.weakest_ - FLOOR_MARGIN_DB))
        else:
            floor = float(self.floor)
            if weakest is not None and not floor < self.weakest_:
                raise InputError(f"--rssi-floor must lie below the weakest real reading ({self.weakest_:g} dBm) so that "
                                 f"'not detected' stays weaker than any reading; got {floor:g}", field="rssi_floor",
                                 expected=f"a value below {self.weakest_:g}", received=f"{floor:g}")
            self.floor_ = floor
        if self.not_detected is not None:
            self.code_ = float(self.not_detected)
        elif code_counts:  # the most frequent code, the smallest of a tie
            self.code_ = float(max(sorted(code_counts), key=code_counts.__getitem__))
        else:
            self.code_ = None
        heard = heard[np.isfinite(heard)]
        self.reference_ = float(np.median(heard)) if heard.size else hi
        return self

    def _scan(self, X: np.ndarray, blocks: list[slice]) -> tuple[float | None, dict[float, int], np.ndarray]:
        """Over the RSSI columns of ``X``, block by block: the weakest real reading (``None``: none), how often
        each code occurs, and each row's strongest reading (``-inf`` for a row that hears nothing)."""
        weakest, code_counts, heard = None, {}, []
        if not self.columns_.size:
            return weakest, code_counts, np.array([])
        for rows in blocks:
            sub = X[rows, self.columns_]
            codes = self._codes(sub)
            real = sub[~codes]
            if real.size:
                weakest = float(real.min()) if weakest is None else min(weakest, float(real.min()))
            for value, count in zip(*np.unique(sub[codes], return_counts=True)):
                code_counts[float(value)] = code_counts.get(float(value), 0) + int(count)
            heard.append(np.where(codes, -np.inf, sub).max(axis=1))
        return weakest, code_counts, np.concatenate(heard)

    @property
    def active(self) -> bool:
        self._check_fitted()
        return bool(self.columns_.size)

    def _check_fitted(self) -> None:
        if not hasattr(self, "columns_"):
            raise NotFittedError("RSSIFloor is not fitted; call fit first")

    def transform(self, X: np.ndarray) -> np.ndarray:
        """A copy of checked rows ``X`` with the codes of the RSSI columns replaced by the floor (and the
        readings re-expressed by ``representation``), ``X`` itself when the step is inactive. Rows are
        independent: they go through in blocks of :data:`BLOCK_ROWS`, so the working copies stay a block's
        size at any row count."""
        self._check_fitted()
        if not self.columns_.size:
            return X
        X = np.array(X, dtype=np.float64, copy=True)
        d = self.columns_.size
        every = d == X.shape[1] and self.columns_[0] == 0 and self.columns_[-1] == d - 1  # ascending, unique
        for start in range(0, X.shape[0], BLOCK_ROWS):
            rows = slice(start, start + BLOCK_ROWS)
            if every:  # all columns RSSI (a fingerprint survey): the block in place, no gathered copy
                X[rows] = self._represent(X[rows])
            else:
                X[rows, self.columns_] = self._represent(X[rows, self.columns_])
        return X

    def _represent(self, sub: np.ndarray) -> np.ndarray:
        """The RSSI columns ``sub`` (a copy, changed in place) of a block of rows as :meth:`transform` gives them."""
        codes = self._codes(sub)
        np.copyto(sub, self.floor_, where=codes)
        if self.representation == "relative":
            top = np.where(codes, -np.inf, sub).max(axis=1, keepdims=True)
            top[~np.isfinite(top)] = self.reference_  # a row that hears nothing stays all floor
            sub = np.where(codes, self.floor_, np.clip(sub - top + self.reference_, self.weakest_, READING_RANGE[1]))
        elif self.representation == "powed":
            sub = ((sub - self.floor_) / -self.floor_) ** POWED_BETA
        elif self.representation == "exponential":
            sub = np.exp((sub - self.floor_) / EXPONENTIAL_ALPHA) / np.exp(-self.floor_ / EXPONENTIAL_ALPHA)
        return sub

    def describe(self) -> str:
        """One line for reports: which columns, which code, which floor."""
        self._check_fitted()
        if not self.columns_.size:
            return "none (no RSSI columns with 'not detected' codes found)"
        code = "values outside -120..0 dBm" if self.not_detected is None else f"{self.code_:g}"
        common = f" (most often {self.code_:g})" if self.not_detected is None and self.code_ is not None else ""
        text = (f"{len(self.columns_)} of {self.n_features_in_} columns are RSSI; not detected ({code}{common}) "
                f"-> {self.floor_:g} dBm, the weakest real reading being {self.weakest_:g} dBm")
        if self.representation == "relative":
            text += f"; relative: each reading minus its row's strongest, plus {self.reference_:g} dBm"
        elif self.representation != "dbm":
            text += f"; representation {self.representation}"
        return text

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        params = {"not_detected": self.not_detected, "floor": self.floor, "min_columns": self.min_columns,
                  "floor_": self.floor_, "code_": self.code_, "weakest_": self.weakest_,
                  "n_features_in_": self.n_features_in_, "representation": self.representation,
                  "reference_": self.reference_}
        return params, {"columns": self.columns_.astype(np.int64)}

    @classmethod
    def from_arrays(cls, params: dict, arrays) -> "RSSIFloor":
        est = cls(params["not_detected"], params["floor"], int(params["min_columns"]),
                  params.get("representation", "dbm"))  # older bundles: dbm
        est.reference_ = float(params.get("reference_", READING_RANGE[1]))
        est.columns_ = np.asarray(arrays["columns"], dtype=np.int64)
        est.floor_, est.weakest_ = float(params["floor_"]), float(params["weakest_"])
        est.code_ = None if params["code_"] is None else float(params["code_"])
        est.n_features_in_ = int(params["n_features_in_"])
        return est
