"""Ellipsoid geometry, vectorised over a batch.

An ellipsoid is ``E(c, C) = {y : (y - c)^T C^{-1} (y - c) <= 1}`` with ``C`` symmetric
positive definite. Every function takes a batch: centres ``(N, n)``, shapes ``(N, n, n)``.

Volume conventions
------------------
* ``"lebesgue"`` (the true volume, what the API returns): ``V_n * det(C)^{1/2}`` with the
  unit-ball volume ``V_n = pi^{n/2} / Gamma(n/2 + 1)`` (``V_2 = pi``: an ellipse's area).
* ``"paper"`` (the LMVE paper's tables): ``det(C)^{1/2}`` without ``V_n``.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
from scipy.special import gammaln

from models._validation import all_finite
from models.exceptions import InputError

VolumeConvention = Literal["lebesgue", "paper"]


@functools.lru_cache(maxsize=64)
def unit_ball_volume(n: int) -> float:
    """Volume of the unit ball in ``R^n``.

    Parameters
    ----------
    n : int
        The dimension.

    Returns
    -------
    float
        ``V_n = pi^{n/2} / Gamma(n/2 + 1)``; ``V_2 = pi``.

    Raises
    ------
    InputError
        ``n < 1``.
    """
    if n < 1:
        raise InputError(f"dimension n must be >= 1; got {n}")
    return float(np.exp(0.5 * n * np.log(np.pi) - gammaln(0.5 * n + 1.0)))


def _as_shapes(C) -> np.ndarray:
    C = np.asarray(C, dtype=np.float64)
    if C.ndim == 2:
        C = C[None]
    if C.ndim != 3 or C.shape[1] != C.shape[2]:
        raise InputError(f"shapes must have shape (N, n, n); got {C.shape}")
    return C


def _det_2x2_spd(C: np.ndarray) -> np.ndarray | None:
    """``det C`` for a batch of finite SPD 2 x 2 matrices in closed form, or ``None`` when any is
    not (infinite, or not positive definite): the caller then takes the general path, which
    handles infinite shapes and raises ``LinAlgError`` for indefinite ones.

    The localisation case: a closed form costs a few vector operations, where LAPACK's batched
    routines cost tens of microseconds of set-up per call (most of a single-row request).
    """
    a, b, c = C[:, 0, 0], C[:, 0, 1], C[:, 1, 1]
    det = a * c - b * b
    # SPD <=> a > 0 and det > 0: the smallest of them all > 0, and the largest det finite (nan
    # propagates through minimum/maximum and compares False, without a warning: np.errstate
    # would cost more than the maths)
    if C.shape[0] and not (np.minimum.reduce(np.minimum(a, det)) > 0 and np.maximum.reduce(det) < math.inf):
        return None
    return det


def sqrt_det(C) -> np.ndarray:
    """``det(C)^{1/2}`` for a batch of SPD matrices, from the Cholesky factor (2 x 2: in closed form).

    Parameters
    ----------
    C : array-like of shape (N, n, n) or (n, n)
        Symmetric positive definite shapes, or infinite ones.

    Returns
    -------
    ndarray of shape (N,)
        ``inf`` where a shape is infinite (an uncalibratable level).

    Raises
    ------
    InputError
        ``C`` is not a batch of square matrices.
    """
    C = _as_shapes(C)
    if C.shape[1] == 2:
        det = _det_2x2_spd(C)
        if det is not None:
            return np.sqrt(det)
    out = np.full(C.shape[0], np.inf)
    finite = np.isfinite(C).all(axis=(1, 2))
    if finite.any():
        L = np.linalg.cholesky(C[finite])
        out[finite] = np.prod(np.diagonal(L, axis1=1, axis2=2), axis=1)
    return out


def volume(C, convention: VolumeConvention = "lebesgue") -> np.ndarray:
    """Volume of each ellipsoid in a batch.

    Parameters
    ----------
    C : array-like of shape (N, n, n) or (n, n)
        The shapes.
    convention : {"lebesgue", "paper"}, default="lebesgue"
        ``V_n det(C)^{1/2}`` (the area for n = 2), or the paper's ``det(C)^{1/2}``.

    Returns
    -------
    ndarray of shape (N,)

    Raises
    ------
    InputError
        An unknown convention, or ``C`` not a batch of square matrices.
    """
    C = _as_shapes(C)
    if convention == "paper":
        return sqrt_det(C)
    if convention == "lebesgue":
        return unit_ball_volume(C.shape[1]) * sqrt_det(C)
    raise InputError(f"convention must be 'lebesgue' or 'paper'; got {convention!r}")


def mahalanobis(residuals, C) -> np.ndarray:
    """Squared Mahalanobis distances, solved through the Cholesky factor (no explicit inverse).

    Parameters
    ----------
    residuals : array-like of shape (N, n)
        ``y - c`` for each row.
    C : array-like of shape (N, n, n) or (n, n)
        One shape per row, or one shared by all rows.

    Returns
    -------
    ndarray of shape (N,)
        ``r_i^T C_i^{-1} r_i``; 0 for an infinite shape (the whole space).

    Raises
    ------
    InputError
        Shapes that do not match the residuals' rows or columns.
    """
    R = np.asarray(residuals, dtype=np.float64)
    if R.ndim != 2:
        raise InputError(f"residuals must have shape (N, n); got {R.shape}")
    C = _as_shapes(C)
    if C.shape[1] != R.shape[1]:
        raise InputError(f"residuals have n={R.shape[1]} columns but shapes are {C.shape[1]}x{C.shape[1]}")
    if C.shape[0] == 1 and R.shape[0] != 1:
        if not np.isfinite(C).all():
            return np.zeros(R.shape[0])
        L = np.linalg.cholesky(C[0])
        z = np.linalg.solve(L, R.T)  # (n, N)
        return np.einsum("ij,ij->j", z, z)
    if C.shape[0] != R.shape[0]:
        raise InputError(f"residuals have {R.shape[0]} rows but there are {C.shape[0]} shapes")
    if C.shape[1] == 2:
        det = _det_2x2_spd(C)
        if det is not None:
            r1, r2 = R[:, 0], R[:, 1]
            return (C[:, 1, 1] * r1 * r1 - 2.0 * C[:, 0, 1] * r1 * r2 + C[:, 0, 0] * r2 * r2) / det
    out = np.zeros(R.shape[0])
    finite = np.isfinite(C).all(axis=(1, 2))
    if finite.any():
        L = np.linalg.cholesky(C[finite])
        z = np.linalg.solve(L, R[finite][..., None])[..., 0]
        out[finite] = np.einsum("ij,ij->i", z, z)
    return out


def contains(points, centers, C) -> np.ndarray:
    """Whether each point lies in its ellipsoid, boundary included.

    Parameters
    ----------
    points : array-like of shape (N, n)
        The points.
    centers : array-like of shape (N, n)
        The ellipsoids' centres.
    C : array-like of shape (N, n, n) or (n, n)
        Their shapes.

    Returns
    -------
    ndarray of shape (N,) of bool
        ``(y_i - c_i)^T C_i^{-1} (y_i - c_i) <= 1``.
    """
    return mahalanobis(np.asarray(points, float) - np.asarray(centers, float), C) <= 1.0


def scale(C, factor) -> np.ndarray:
    """Scale shapes: ``factor * C`` is the ellipsoid with axes multiplied by ``sqrt(factor)``.

    Parameters
    ----------
    C : array-like of shape (N, n, n) or (n, n)
        The shapes.
    factor : float or array-like of shape (N,)
        Positive; ``+inf`` gives the whole space (an infinite shape).

    Returns
    -------
    ndarray of shape (N, n, n)

    Raises
    ------
    InputError
        A factor that is not positive, or NaN.
    """
    C = _as_shapes(C)
    if isinstance(factor, (float, int)) and not isinstance(factor, bool):  # the common scalar case
        if not factor > 0:  # also refuses nan
            raise InputError(f"scale factor must be positive; got {factor}")
        return C * factor if math.isfinite(factor) else np.full_like(C, np.inf)
    f = np.asarray(factor, dtype=np.float64)
    if np.any(f <= 0) or np.any(np.isnan(f)):
        raise InputError(f"scale factor must be positive; got {factor}")
    if f.ndim == 0:
        return C * f if np.isfinite(f) else np.full_like(C, np.inf)
    return C * f[:, None, None]


def _semi_axes_and_angle_2x2(C: np.ndarray, det: np.ndarray, spd: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form eigen-decomposition of finite symmetric 2 x 2 shapes with determinants ``det``.

    Eigenvalues ``m +- q`` (``m = (a + c)/2``, ``q = hypot((a - c)/2, b)``), the small one as
    ``det / big`` (no cancellation for elongated shapes); the major axis at ``0.5 atan2(2b, a - c)``
    in (-pi/2, pi/2]. Returns semi-axes ``(N, 2)`` (longest first) and that angle ``(N,)``.
    ``spd=True`` (every shape known positive definite, so ``big > 0``) skips the guards that
    clamp the axes of indefinite shapes at 0: fewer vector operations on the serving path.
    """
    a, b, c = C[:, 0, 0], C[:, 0, 1], C[:, 1, 1]
    half_diff = 0.5 * (a - c)
    semi = np.empty((C.shape[0], 2))
    big = semi[:, 0]
    np.hypot(half_diff, b, out=big)
    big += 0.5 * (a + c)
    if spd:
        np.divide(det, big, out=semi[:, 1])
        np.sqrt(semi, out=semi)
    else:
        positive = big > 0
        np.divide(det, big, out=semi[:, 1], where=positive)
        semi[~positive, 1] = 0.0
        np.sqrt(np.maximum(semi, 0.0, out=semi), out=semi)
    # atan2(b, (a - c)/2) is atan2(2b, a - c): both arguments halved exactly
    return semi, 0.5 * np.arctan2(b, half_diff)


def axes(C) -> tuple[np.ndarray, np.ndarray]:
    """Semi-axis lengths and unit axis directions (2 x 2: in closed form).

    Parameters
    ----------
    C : array-like of shape (N, n, n) or (n, n)
        Symmetric shapes.

    Returns
    -------
    semi_axes : ndarray of shape (N, n)
        Longest first.
    directions : ndarray of shape (N, n, n)
        Column ``j`` is the direction of the ``j``-th semi-axis.
    """
    C = _as_shapes(C)
    if C.shape[1] == 2 and all_finite(C):
        semi, theta = _semi_axes_and_angle_2x2(C, C[:, 0, 0] * C[:, 1, 1] - C[:, 0, 1] ** 2)
        directions = np.empty_like(C)
        directions[:, 0, 0] = directions[:, 1, 1] = np.cos(theta)
        directions[:, 1, 0] = np.sin(theta)
        directions[:, 0, 1] = -directions[:, 1, 0]
        return semi, directions
    w, V = np.linalg.eigh(C)
    return np.sqrt(np.maximum(w[:, ::-1], 0.0)), V[:, :, ::-1]


def ellipse_2d(C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Area, semi-axes and orientation of finite SPD 2 x 2 shapes, in closed form.

    The same values as :func:`volume`, :func:`axes` and :func:`orientation_2d`, in a dozen vector
    operations: the serving path's single-row cost.

    Parameters
    ----------
    C : array-like of shape (N, 2, 2) or (2, 2)
        Finite, positive definite shapes.

    Returns
    -------
    area : ndarray of shape (N,)
        ``pi det(C)^{1/2}``.
    semi_axes : ndarray of shape (N, 2)
        Longest first.
    orientation : ndarray of shape (N,)
        The major axis' angle in (-pi/2, pi/2], ``0.5 atan2(2b, a - c)``.

    Raises
    ------
    InputError
        Shapes that are not 2 x 2, not finite or not positive definite.
    """
    C = _as_shapes(C)
    if C.shape[1] != 2:
        raise InputError(f"ellipse_2d needs 2 x 2 shapes; got {C.shape[1]} x {C.shape[1]}")
    if C.shape[0] == 1:
        return _ellipse_one(C[0])
    det = _det_2x2_spd(C)
    if det is None:
        raise InputError("ellipse_2d needs finite positive-definite shapes")
    semi, angle = _semi_axes_and_angle_2x2(C, det, spd=True)
    return math.pi * np.sqrt(det), semi, angle


def _ellipse_one(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`ellipse_2d` of one shape (a single-row request): the same operations in the same order on
    Python floats (``np.hypot`` and ``np.arctan2`` as numpy computes them), the same bits as the vector path."""
    (a, b), (_, c) = C.tolist()
    det = a * c - b * b
    if not (a > 0 and det > 0 and det < math.inf):  # nan compares False: refused
        raise InputError("ellipse_2d needs finite positive-definite shapes")
    half_diff = 0.5 * (a - c)
    big = float(np.hypot(half_diff, b)) + 0.5 * (a + c)
    return (np.array([math.pi * math.sqrt(det)]), np.array([[math.sqrt(big), math.sqrt(det / big)]]),
            np.array([0.5 * float(np.arctan2(b, half_diff))]))


def orientation_2d(C) -> np.ndarray:
    """The major axis' angle from the first coordinate axis.

    Parameters
    ----------
    C : array-like of shape (N, 2, 2) or (2, 2)
        Symmetric shapes.

    Returns
    -------
    ndarray of shape (N,)
        Radians, in (-pi/2, pi/2].

    Raises
    ------
    InputError
        Shapes that are not 2 x 2.
    """
    C = _as_shapes(C)
    if C.shape[1] != 2:
        raise InputError(f"orientation is defined for n = 2; got n = {C.shape[1]}")
    return major_axis_angle(axes(C)[1])


def major_axis_angle(directions) -> np.ndarray:
    """The angle of the first direction :func:`axes` returns (n = 2), without a second eigendecomposition.

    Parameters
    ----------
    directions : array-like of shape (N, 2, 2)
        The ``directions`` of :func:`axes`.

    Returns
    -------
    ndarray of shape (N,)
        Radians, in (-pi/2, pi/2].
    """
    major = np.asarray(directions)[:, :, 0]
    angle = np.arctan2(major[:, 1], major[:, 0])
    angle = np.where(angle > np.pi / 2, angle - np.pi, angle)
    return np.where(angle <= -np.pi / 2, angle + np.pi, angle)


def _unit_sphere_points(n: int, k: int) -> np.ndarray:
    if n == 2:
        t = np.linspace(0.0, 2.0 * np.pi, k, endpoint=False)
        return np.stack([np.cos(t), np.sin(t)], axis=1)
    if n == 3:  # Fibonacci sphere: near-uniform, deterministic
        i = np.arange(k) + 0.5
        phi = np.arccos(1.0 - 2.0 * i / k)
        theta = math.pi * (1.0 + 5.0**0.5) * i
        return np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], axis=1)
    raise InputError(f"boundary points are available for n = 2 or 3; got n = {n}")


def boundary_points(centers, C, k: int = 64, closed: bool = False) -> np.ndarray:
    """Points on the boundary of each ellipsoid: each ``p`` has ``(p - c)^T C^{-1} (p - c) = 1``.

    Parameters
    ----------
    centers : array-like of shape (N, n)
        The ellipsoids' centres.
    C : array-like of shape (N, n, n) or (n, n)
        Their shapes, finite.
    k : int, default=64
        Points per ellipsoid, at least 3.
    closed : bool, default=False
        Repeat the first point at the end, as map clients (GeoJSON) expect.

    Returns
    -------
    ndarray of shape (N, k, n), or (N, k + 1, n) when closed
        For n = 2 a polygon in counter-clockwise order; for n = 3 points covering the surface.

    Raises
    ------
    InputError
        ``k < 3``, an infinite shape (an unbounded region), or n other than 2 or 3.
    """
    C = _as_shapes(C)
    centers = np.asarray(centers, dtype=np.float64).reshape(C.shape[0], C.shape[1])
    if int(k) < 3:
        raise InputError(f"boundary_points must be at least 3; got {k}")
    if not np.isfinite(C).all():
        raise InputError("boundary points are undefined for an unbounded region (alpha_q = +inf)")
    U = _unit_sphere_points(C.shape[1], int(k))  # (k, n)
    L = np.linalg.cholesky(C)  # y = c + L u, |u| = 1  =>  (y-c)^T C^-1 (y-c) = u^T u = 1
    P = centers[:, None, :] + np.einsum("nij,kj->nki", L, U)
    if closed:
        P = np.concatenate([P, P[:, :1]], axis=1)
    return P
