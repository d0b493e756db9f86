"""The one registry of shape methods and centres: what the bundle, the pipeline, the service,
the report and the benchmarks read.

Adding a shape method is its module (an estimator following :mod:`models.shapes.base`, with
``to_arrays``/``from_arrays``) plus one :class:`MethodSpec` in :data:`METHODS`; adding a centre is
its module in :mod:`models.centres` plus one :class:`~models.centres.kinds.CentreSpec` in
:data:`models.centres.kinds.KINDS` (the stack, which blends those kinds, joins them here). Names resolve through
:func:`method` and :func:`centre`, which name the choices when a name is unknown.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Literal

from models.centres.kinds import KINDS, TYPES, CentreSpec, check_entry
from models.centres.stack import StackCentre
from models._validation import lookup
from models.exceptions import InputError, UnknownMethodError
from models.shapes import EmpiricalCopulaBox, GaussianEllipsoid, IsotropicBall, LMVEShape, NearestNeighbourEllipsoid
from models.shapes.base import EllipsoidShapeEstimator, ShapeEstimator

#: training options an estimator receives when its constructor has a parameter of that name
_RUNTIME = {"seed": "random_state", "device": "device", "progress": "progress"}


def _accepted(cls) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters) - {"self"}


@dataclass(frozen=True)
class MethodSpec:
    """A shape method as the registry lists it.

    Parameters
    ----------
    name : str
        Its name in bundles, the API and reports.
    label : str
        Its label in words ("LMVE").
    estimator : type
        The :class:`~models.shapes.base.ShapeEstimator` subclass.
    kind : {"ellipsoid", "box"}
        The regions it gives.
    fallback_rank : int or None
        Its place in the ellipse routes' fallback order (0 is preferred); ``None``: never served by them.

    Raises
    ------
    TypeError
        When made (at import): an estimator that is no complete :class:`~models.shapes.base.ShapeEstimator`, an
        ellipsoid method whose estimator gives no ellipsoids, or an unknown kind.
    """

    name: str
    label: str
    estimator: type
    kind: Literal["ellipsoid", "box"]
    fallback_rank: int | None

    def __post_init__(self):
        check_entry(self, ShapeEstimator)
        if self.kind not in ("ellipsoid", "box"):
            raise TypeError(f"method {self.name!r}: kind must be 'ellipsoid' or 'box'; got {self.kind!r}")
        if self.kind == "ellipsoid" and not issubclass(self.estimator, EllipsoidShapeEstimator):
            raise TypeError(f"method {self.name!r}: an ellipsoid method's estimator is an EllipsoidShapeEstimator")

    @property
    def file(self) -> str:
        """Its arrays' file in a bundle."""
        return f"{self.name}.npz"

    def make(self, *, seed: int = 0, device: str = "auto", progress: bool = False, **params):
        """A new unfitted estimator, with the training options its constructor accepts.

        Parameters
        ----------
        seed : int, default=0
            Passed as ``random_state`` when accepted.
        device : str, default="auto"
            Passed as ``device`` when accepted.
        progress : bool, default=False
            Passed as ``progress`` when accepted.
        **params
            Hyperparameters.

        Returns
        -------
        ShapeEstimator

        Raises
        ------
        InputError
            A hyperparameter the estimator does not have; the message lists those it takes.
        """
        accepted = _accepted(self.estimator)
        unknown = sorted(set(params) - accepted)
        if unknown:
            raise InputError(f"{self.label} has no parameter {', '.join(unknown)}; it takes {', '.join(sorted(accepted))}",
                             field=f"{self.name} parameters", expected=", ".join(sorted(accepted)),
                             received=", ".join(unknown))
        runtime = {_RUNTIME[k]: v for k, v in {"seed": seed, "device": device, "progress": progress}.items()
                   if _RUNTIME[k] in accepted}
        return self.estimator(**{**runtime, **params})


METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec("ge", "GE", GaussianEllipsoid, "ellipsoid", fallback_rank=2),
    MethodSpec("nle", "NLE", NearestNeighbourEllipsoid, "ellipsoid", fallback_rank=1),
    MethodSpec("lmve", "LMVE", LMVEShape, "ellipsoid", fallback_rank=0),
    MethodSpec("ball", "Ball", IsotropicBall, "ellipsoid", fallback_rank=3),
    MethodSpec("copula", "Copula", EmpiricalCopulaBox, "box", fallback_rank=None),
)}

CENTRES: dict[str, CentreSpec] = {**KINDS, "stack": CentreSpec(
    "stack", "a non-negative least-squares blend of the other candidates, weighted on their out-of-fold "
    "predictions (alone: of paper, scaled, knn and hgb)", StackCentre, {}, interpolates=True, cost="members")}
_ranks = [s.fallback_rank for s in METHODS.values() if s.fallback_rank is not None]
if len(set(_ranks)) != len(_ranks):
    raise TypeError(f"two methods share a fallback rank: {sorted(_ranks)}")

#: centre classes by the name a bundle records
CENTRE_TYPES: dict[str, type] = {**TYPES, StackCentre.__name__: StackCentre}


def method(name: str) -> MethodSpec:
    """The shape method called ``name``.

    Parameters
    ----------
    name : str
        A registry name (``"lmve"``, ``"nle"``, ``"ge"``, ``"ball"``, ``"copula"``).

    Returns
    -------
    MethodSpec

    Raises
    ------
    UnknownMethodError
        ``name`` is none of them; the message lists them.
    """
    return lookup(METHODS, name, "method", error=UnknownMethodError)


def centre(name: str) -> CentreSpec:
    """The centre kind called ``name``.

    Parameters
    ----------
    name : str
        A centre name, as ``lmve-train --centre`` takes it.

    Returns
    -------
    CentreSpec

    Raises
    ------
    InputError
        ``name`` is none of them; the message lists them.
    """
    return lookup(CENTRES, name, "centre")


def fallback_order() -> tuple[str, ...]:
    """The ellipse-serving methods, preferred first.

    Returns
    -------
    tuple of str
        LMVE, then NLE, then GE, then the ball.
    """
    return _FALLBACK_ORDER


_FALLBACK_ORDER = tuple(s.name for s in sorted((s for s in METHODS.values() if s.fallback_rank is not None),
                                               key=lambda s: s.fallback_rank))
