"""Floor labels (a floor, or a (building, floor) pair) as class codes, and back: :class:`FloorLabels`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.exceptions import InputError


def label_key(value) -> str:
    """The canonical text of one label value.

    Parameters
    ----------
    value : int, float or str
        A floor or building label.

    Returns
    -------
    str
        Integers (and integral floats) as ``"2"``, other floats by ``repr``, text stripped.

    Raises
    ------
    TypeError
        A boolean, a non-finite float, or anything but a number or text.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a boolean is not a floor label")
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise TypeError("a floor label must be finite")
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, str):
        return value.strip()
    raise TypeError(f"a floor label is a number or text, not {type(value).__name__}")


@dataclass
class FloorLabels:
    """The classes: one row of label texts per class, one column per label column.

    Parameters
    ----------
    columns : tuple of str
        The label columns: the building column first when there is one, then the floor column.
    values : ndarray of shape (K, c) of str
        Each class's labels.
    numeric : tuple of bool
        Which columns' labels are integers (answered as JSON numbers).
    """

    columns: tuple[str, ...]
    values: np.ndarray  # (K, c) str
    numeric: tuple[bool, ...]

    @classmethod
    def of(cls, columns, *label_columns) -> tuple["FloorLabels", np.ndarray]:
        """The classes of per-row labels, and each row's class code.

        Parameters
        ----------
        columns : sequence of str
            The label columns' names.
        *label_columns : array-like of shape (m,)
            One array of labels per column, in the order of ``columns``.

        Returns
        -------
        labels : FloorLabels
            Classes sorted by their labels (numerically for integer columns).
        codes : ndarray of shape (m,)
            Each row's class.
        """
        keys = np.column_stack([[label_key(v) for v in np.asarray(col).ravel()] for col in label_columns])
        values, codes = np.unique(keys, axis=0, return_inverse=True)
        numeric = tuple(bool(all(_integral(v) for v in values[:, j])) for j in range(values.shape[1]))
        if any(numeric):  # numeric columns in numeric order
            order = sorted(range(len(values)), key=lambda i: tuple(
                (int(v),) if num else (0, v) for v, num in zip(values[i], numeric)))
            rank = np.empty(len(values), dtype=np.intp)
            rank[order] = np.arange(len(values))
            values, codes = values[order], rank[codes.ravel()]
        return cls(tuple(columns), values, numeric), np.asarray(codes, dtype=np.intp).ravel()

    def __len__(self) -> int:
        return len(self.values)

    def label(self, k: int) -> dict:
        """A class as JSON.

        Parameters
        ----------
        k : int
            The class code.

        Returns
        -------
        dict
            One key per column's role (``{"building": .., "floor": ..}``), integers as numbers.
        """
        return {role: (int(v) if num else str(v))
                for role, v, num in zip(self.roles, self.values[k], self.numeric)}

    @property
    def roles(self) -> tuple[str, ...]:
        """The columns' roles: ``("building", "floor")`` or ``("floor",)``."""
        return ("building", "floor") if len(self.columns) == 2 else ("floor",)

    def encode(self, floors, buildings=None) -> np.ndarray:
        """Each row's class code.

        Parameters
        ----------
        floors : sequence
            Each row's floor.
        buildings : sequence, default=None
            Each row's building: required when the classes have a building, refused otherwise.

        Returns
        -------
        ndarray of shape (N,)

        Raises
        ------
        InputError
            Buildings missing or refused or of another count, or a label that is not a number or text or that
            the bundle does not know (the message names the row and the known values).
        """
        lookup = {tuple(row): k for k, row in enumerate(self.values)}
        need_building = len(self.columns) == 2
        if need_building and buildings is None:
            raise InputError(f"buildings: this bundle's floors are ({self.columns[0]}, {self.columns[1]}) pairs; give "
                             "a building with each floor", field="buildings",
                             expected=f"one {self.columns[0]} per row", received="none")
        if not need_building and buildings is not None:
            raise InputError("buildings: this bundle's floors have no building column; leave `buildings` out",
                             field="buildings", expected="no buildings", received=f"{len(buildings)} values")
        if buildings is not None and len(buildings) != len(floors):
            raise InputError(f"buildings has {len(buildings)} values for {len(floors)} floors", field="buildings",
                             expected=f"{len(floors)} values", received=f"{len(buildings)}")
        codes = np.empty(len(floors), dtype=np.intp)
        for i, f in enumerate(floors):
            parts = (buildings[i], f) if need_building else (f,)
            try:
                key = tuple(label_key(v) for v in parts)
            except TypeError as exc:
                where = "buildings" if need_building and not _is_label(parts[0]) else "floors"
                raise InputError(f"{where}[{i}]: {exc}", field=f"{where}[{i}]", expected="a number or text",
                                 received=repr(parts[0] if where == "buildings" else f)[:40]) from None
            code = lookup.get(key)
            if code is None:
                known = ", ".join("/".join(row) for row in self.values[:12]) + (" ..." if len(self.values) > 12 else "")
                what = "/".join(self.columns)
                raise InputError(f"floors[{i}]: {what} {'/'.join(key)} is not one this bundle knows; it knows {known}",
                                 field=f"floors[{i}]", expected=f"one of {known}", received="/".join(key))
            codes[i] = code
        return codes

    def to_arrays(self) -> tuple[dict, dict]:
        """The classes in a bundle's form.

        Returns
        -------
        params : dict
            ``columns`` and ``numeric``.
        arrays : dict of str -> ndarray
            ``labels``, the classes' texts.
        """
        return {"columns": list(self.columns), "numeric": list(self.numeric)}, {"labels": self.values.astype(str)}

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "FloorLabels":
        """Rebuild the classes from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            ``columns`` and ``numeric``.
        arrays : dict of str -> ndarray
            ``labels``.

        Returns
        -------
        FloorLabels
        """
        return cls(tuple(params["columns"]), np.asarray(arrays["labels"]).astype(str),
                   tuple(bool(v) for v in params["numeric"]))


def _integral(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def _is_label(value) -> bool:
    try:
        label_key(value)
        return True
    except TypeError:
        return False

