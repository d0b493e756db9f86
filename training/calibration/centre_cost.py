"""What a centre's fit is costed at, so that the unit folds it is refitted on depend on the data alone.

Cross-fit calibration across units refits the served centre once per unit fold
(:func:`training.calibration.across.centre_folds`); how many folds it affords is judged from this cost,
not from a clock, so that two runs on the same data and seed make the same bundle on any machine, at any
load. The cost is a coarse model of one fit in seconds on the reference machine (2 cores):

    seconds = rate * (rows / 1000) ** power * features / 100,

with ``rows`` the training rows the centre fits on (after its own ``max_rows`` cap) and ``(rate, power)``
per centre kind in :data:`RATES`. A stack costs its members' fits once per blending fold and once more on
all rows. ``docs/benchmarks/design.md`` shows the fits the rates were read from.
"""

from __future__ import annotations

from models.centres.kinds import KINDS

#: per centre kind: (seconds of a fit on 1,000 rows x 100 features on the reference machine, growth in rows),
#: each kind's ``CentreSpec.cost`` (the registry refuses a kind without one)
RATES: dict[str, tuple[float, float]] = {name: spec.cost for name, spec in KINDS.items() if spec.cost != "members"}


def fit_seconds(config, name: str, n_rows: int, n_features: int) -> float:
    """The cost of one fit of centre ``name`` (made by ``config.make_centre``) on ``n_rows`` rows of
    ``n_features`` features, in reference seconds (module docstring); every kind of
    :data:`models.registry.CENTRES` has a rate (the stack's is its members')."""
    centre = config.make_centre(name)
    if name == "stack":
        return (centre.cv + 1) * sum(fit_seconds(config, member, n_rows, n_features) for member in centre.members)
    rate, power = RATES[name]
    cap = getattr(centre, "max_rows", None)
    rows = min(n_rows, cap) if cap else n_rows
    return rate * (max(rows, 1) / 1000) ** power * n_features / 100
