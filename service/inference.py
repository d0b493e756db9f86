"""The region routes' computations: a request's size limit, and a model answer turned into JSON rows.

Input checks live in :class:`models.model.RegionModel` (one check per request, errors naming the
field); this module adds only what is the service's own: the row limit (413), and the JSON rows of an
answer, read from the table of answers (:mod:`models.answers`).
"""

from __future__ import annotations

from models import answers
from service.exceptions import APIError


def check_row_limit(rows: list, field: str, max_rows: int) -> None:
    """413 when a request carries more than ``max_rows`` rows (``LMVE_MAX_ROWS``)."""
    if len(rows) > max_rows:
        raise APIError(413, "Too many rows", f"{field} has {len(rows)} rows; the limit is {max_rows} "
                       "(LMVE_MAX_ROWS): split the batch", field=field, expected=f"at most {max_rows} rows",
                       received=f"{len(rows)} rows")


def region_rows(answer, boundary_points: int | None) -> list[dict]:
    """The JSON rows of a :class:`~models.model.RegionAnswer` (the region fields of :data:`models.answers.FIELDS`)."""
    return answers.rows(answers.Batch(answer, boundary_points=boundary_points), answers.REGION)


def result_rows(answer) -> list[dict]:
    """The JSON rows of an :class:`~models.model.Assessment` (the containment fields of the same table)."""
    return answers.rows(answers.Batch(answer), answers.CONTAINS)
