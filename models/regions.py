"""Calibrated prediction regions: a batch of ellipsoids, or of boxes (the Copula baseline)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models import geometry
from models.exceptions import InputError


def _check_points(points, centers: np.ndarray) -> np.ndarray:
    P = np.asarray(points, dtype=np.float64)
    if P.shape != centers.shape:
        raise InputError(f"points must have shape {centers.shape} (one n-dim point per row); got {P.shape}")
    if not np.isfinite(P).all():
        raise InputError("points contains NaN or inf; only finite values are accepted")
    return P


@dataclass(frozen=True)
class _Regions:
    """What every batch of calibrated regions has: centres, the level and the threshold used."""

    centers: np.ndarray
    coverage: float
    alpha_q: float

    def __len__(self) -> int:
        return self.centers.shape[0]

    def distance(self, points) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def contains(self, points) -> np.ndarray:
        """Whether each point lies in its region.

        Parameters
        ----------
        points : array-like of shape (N, n)
            One point per region.

        Returns
        -------
        ndarray of shape (N,) of bool
            ``distance(points) <= 1``.

        Raises
        ------
        InputError
            Points of another shape than the centres, or not finite.
        """
        return self.distance(points) <= 1.0


@dataclass(frozen=True)
class EllipsoidRegions(_Regions):
    """``E_i = {y : (y - centers[i])^T shapes[i]^{-1} (y - centers[i]) <= 1}``.

    Attributes
    ----------
    centers : ndarray of shape (N, n)
        The ellipsoids' centres.
    shapes : ndarray of shape (N, n, n)
        Calibrated shape matrices (``alpha_q * C(x)``); all ``inf`` when ``alpha_q = +inf``.
    coverage : float
        The level ``eta`` these regions were calibrated for.
    alpha_q : float
        The conformal threshold used.
    """

    shapes: np.ndarray = None

    kind = "ellipsoid"

    @property
    def bounded(self) -> bool:
        """Whether the regions are finite (``alpha_q`` is)."""
        return bool(np.isfinite(self.alpha_q))

    def volume(self, convention: geometry.VolumeConvention = "lebesgue") -> np.ndarray:
        """The regions' volumes.

        Parameters
        ----------
        convention : {"lebesgue", "paper"}, default="lebesgue"
            The true volume (area for n = 2), or the paper's ``det(C)^{1/2}``.

        Returns
        -------
        ndarray of shape (N,)
        """
        return geometry.volume(self.shapes, convention)

    def distance(self, points) -> np.ndarray:
        """Scaled Mahalanobis distance of each point to its region.

        Parameters
        ----------
        points : array-like of shape (N, n)
            One point per region.

        Returns
        -------
        ndarray of shape (N,)
            ``(y - c)^T S^{-1} (y - c)``; at most 1 inside.

        Raises
        ------
        InputError
            Points of another shape than the centres, or not finite.
        """
        P = _check_points(points, self.centers)
        return geometry.mahalanobis(P - self.centers, self.shapes)

    def boundary(self, k: int = 64, closed: bool = True) -> np.ndarray:
        """Points on the regions' boundaries (a polygon for n = 2).

        Parameters
        ----------
        k : int, default=64
            Points per boundary.
        closed : bool, default=True
            Repeat the first point at the end.

        Returns
        -------
        ndarray of shape (N, k, n), or (N, k + 1, n) when closed
        """
        return geometry.boundary_points(self.centers, self.shapes, k, closed=closed)


@dataclass(frozen=True)
class BoxRegions(_Regions):
    """Axis-aligned boxes ``{y : |y_j - centers[i, j]| <= half_widths[i, j] for all j}``.

    Attributes
    ----------
    centers : ndarray of shape (N, n)
        The boxes' centres.
    coverage : float
        The level ``eta`` these boxes were calibrated for.
    alpha_q : float
        The conformal threshold used.
    half_widths : ndarray of shape (N, n)
        Half of each side; all ``inf`` when ``alpha_q = +inf``.
    """

    half_widths: np.ndarray = None

    kind = "box"

    @property
    def bounded(self) -> bool:
        """Whether every half width is finite."""
        return bool(np.isfinite(self.half_widths).all())

    def volume(self, convention: geometry.VolumeConvention = "lebesgue") -> np.ndarray:
        """The boxes' volumes, the same in both conventions.

        Parameters
        ----------
        convention : {"lebesgue", "paper"}, default="lebesgue"
            Accepted for symmetry with :meth:`EllipsoidRegions.volume`.

        Returns
        -------
        ndarray of shape (N,)
            ``prod_j 2 a_j sigma_j(x)``.
        """
        return np.prod(2.0 * self.half_widths, axis=1)

    def distance(self, points) -> np.ndarray:
        """Scaled box distance of each point to its region.

        Parameters
        ----------
        points : array-like of shape (N, n)
            One point per region.

        Returns
        -------
        ndarray of shape (N,)
            ``max_j |y_j - c_j| / half_width_j``; at most 1 inside.

        Raises
        ------
        InputError
            Points of another shape than the centres, or not finite.
        """
        P = _check_points(points, self.centers)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.nan_to_num(np.max(np.abs(P - self.centers) / self.half_widths, axis=1), nan=0.0)
