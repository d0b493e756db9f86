"""Fingerprints as readings: the RSSI columns taken back from the standardised features, and re-expressed.

A distance between fingerprints is made for readings, not for standard-scaled columns: scaling a rarely heard
transmitter's column to unit variance lets its few readings dominate every distance. :class:`ReadingSpace`
undoes the scaler (and the RSSI step's own re-expression) on the RSSI columns alone, so a fingerprint centre
fitted on the model's standardised features searches the readings themselves, "not heard" at the step's floor;
the other columns (identifiers, coordinates of anything else) take no part.

:func:`represent` re-expresses readings for a Euclidean search (Torres-Sospedra et al., 2015,
"Comprehensive analysis of distance and similarity measures for Wi-Fi fingerprinting indoor positioning
systems"). Every reading weaker than a ``cutoff`` (at least the floor) counts as not heard, then:

- ``"dbm"`` (and ``"positive"``, the same distances): ``x - cutoff``;
- ``"exponential"``: ``exp(x / 24) - exp(cutoff / 24)`` (the paper's ``exp((x - min) / 24) / exp(-min / 24)``
  less a constant);
- ``"powed"``: ``((x - cutoff) / -cutoff) ** e``;
- ``"relative"``: each heard reading minus its row's strongest plus the training rows' median strongest (a
  phone's gain cancels), then as ``"dbm"``.

Each gives 0 for "not heard", so the rows are sparse and the search (:mod:`models.centres.search`) multiplies
only what a row hears.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.exceptions import InputError
from models.preprocessing import EXPONENTIAL_ALPHA, POWED_BETA

#: what :func:`represent` offers
REPRESENTATIONS = ("dbm", "positive", "exponential", "powed", "relative")
#: readings within this many dB of the floor are the floor (the scaler's round trip moves them by ~1e-13)
SNAP_DB = 1e-6


@dataclass(eq=False)
class ReadingSpace:
    """The RSSI columns of standardised features, as the readings they came from.

    Parameters
    ----------
    columns : ndarray of int
        The RSSI columns among the features.
    mean, scale : ndarray of shape (c,)
        The scaler's mean and scale of those columns.
    floor : float
        "Not heard", in dBm (the RSSI step's floor).
    weakest : float
        The weakest real reading of the training rows.
    step : str
        The RSSI step's own representation (``"dbm"``, ``"relative"``, ``"powed"``, ``"exponential"``), undone
        by :meth:`readings`.
    reference : float
        The median strongest reading of the training rows (``"relative"``'s anchor).
    """

    columns: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    floor: float
    weakest: float
    step: str = "dbm"
    reference: float = -60.0

    @classmethod
    def of(cls, preprocess, scaler) -> "ReadingSpace | None":
        """The space of a fitted RSSI step and the scaler after it.

        Parameters
        ----------
        preprocess : RSSIFloor or None
            The model's fitted RSSI step.
        scaler : StandardScaler
            The scaler fitted after it (``mean_``, ``scale_``).

        Returns
        -------
        ReadingSpace or None
            ``None`` without an active step: no fingerprint, the rows are features, searched as they are.
        """
        if preprocess is None or not preprocess.active:
            return None
        cols = np.asarray(preprocess.columns_, dtype=np.int64)
        return cls(cols, np.asarray(scaler.mean_, float)[cols], np.asarray(scaler.scale_, float)[cols],
                   float(preprocess.floor_), float(preprocess.weakest_), preprocess.representation,
                   float(preprocess.reference_))

    def readings(self, Xs: np.ndarray) -> np.ndarray:
        """The readings of standardised rows.

        Parameters
        ----------
        Xs : ndarray of shape (N, d)
            Standardised features.

        Returns
        -------
        ndarray of shape (N, c)
            The RSSI columns' readings in dBm, "not heard" exactly ``floor``.
        """
        V = Xs.take(self.columns, axis=1)  # C order, where Xs[:, columns] would be F (each row's readings apart)
        V *= self.scale
        V += self.mean
        if self.step == "powed":
            V = self.floor + (-self.floor) * np.clip(V, 0.0, None) ** (1.0 / POWED_BETA)
        elif self.step == "exponential":
            V = EXPONENTIAL_ALPHA * np.log(np.clip(V, np.finfo(float).tiny, None))
        V[V <= self.floor + SNAP_DB] = self.floor
        return V

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The space in a bundle's form.

        Returns
        -------
        params : dict
            ``floor``, ``weakest``, ``step``, ``reference``.
        arrays : dict of str -> ndarray
            The columns and the scaler's mean and scale of them.
        """
        return ({"floor": self.floor, "weakest": self.weakest, "step": self.step, "reference": self.reference},
                {"space_columns": self.columns, "space_mean": self.mean, "space_scale": self.scale})

    @classmethod
    def from_arrays(cls, params: dict, arrays) -> "ReadingSpace":
        """The space :meth:`to_arrays` stored.

        Parameters
        ----------
        params : dict
        arrays : mapping of str -> ndarray

        Returns
        -------
        ReadingSpace
        """
        return cls(np.asarray(arrays["space_columns"], np.int64), np.asarray(arrays["space_mean"], float),
                   np.asarray(arrays["space_scale"], float), float(params["floor"]), float(params["weakest"]),
                   params["step"], float(params["reference"]))


def check_representation(name: str) -> str:
    """A representation's name, checked.

    Parameters
    ----------
    name : str

    Returns
    -------
    str
        ``name``, one of :data:`REPRESENTATIONS`.

    Raises
    ------
    InputError
        Another name; the message lists those there are.
    """
    if name not in REPRESENTATIONS:
        raise InputError(f"representation must be one of {', '.join(REPRESENTATIONS)}; got {name!r}",
                         field="representation", expected=" | ".join(REPRESENTATIONS), received=repr(name))
    return name


def represent(R: np.ndarray, representation: str, cutoff: float, floor: float, reference: float) -> np.ndarray:
    """Readings re-expressed for a Euclidean search (the module docstring gives each representation).

    Parameters
    ----------
    R : ndarray of shape (N, c)
        Readings in dBm, "not heard" = ``floor``.
    representation : str
        One of :data:`REPRESENTATIONS`.
    cutoff : float
        Readings weaker than this count as not heard (at least ``floor``).
    floor : float
        "Not heard".
    reference : float
        Where ``"relative"`` puts each row's strongest reading.

    Returns
    -------
    ndarray of shape (N, c)
        0 wherever a row hears nothing at or above ``cutoff``.

    Raises
    ------
    InputError
        An unknown ``representation``.
    """
    check_representation(representation)
    if representation == "relative":
        heard = R > floor
        top = np.where(heard, R, -np.inf).max(axis=1, keepdims=True)
        top[~np.isfinite(top)] = reference
        R = np.where(heard, R - top + reference, floor)
    T = np.maximum(R, cutoff)
    if representation == "exponential":
        return np.exp(T / EXPONENTIAL_ALPHA) - np.exp(cutoff / EXPONENTIAL_ALPHA)
    if representation == "powed":
        return ((T - cutoff) / -cutoff) ** POWED_BETA
    return T - cutoff
