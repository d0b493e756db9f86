"""Tables of readings by column name: CSV (plain or gzip) and Parquet, read in partitions of bounded memory.

``lmve-evaluate`` reads a labelled walk and ``lmve-predict`` a log of readings through this module, so both
name the same column and line for a bad cell. A file is read as :class:`Partition` s of whole rows, each
a fixed number of data rows from a known first row: the local path reads them one after the other, a Dask
cluster reads them on its workers (``dask.dataframe.from_map``), and both cut the file at the same rows,
which keeps every batch (so every answer, to the last bit) the same on both paths.

* CSV: the file is split by a scan for line ends (numpy over 16 MiB blocks, about 1 GB/s), each
  partition a byte range parsed by pandas' C parser with the header's names. A gzip file cannot be
  split: it is read in one stream of ``rows`` -row frames (local only).
* Parquet: partitions are row ranges read with pyarrow (only the row groups that hold them, only the
  columns asked for).

Lines are counted as a text editor shows them (the header is line 1, so data row ``r``, 0-based, is line
``r + 2``); Parquet rows from 1. A cell's text with a quoted line break is not supported in a split CSV.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from models.exceptions import InputError

#: what each suffix reads and writes as
READ_FORMATS = {".csv": "csv", ".gz": "csv.gz", ".parquet": "parquet", ".pq": "parquet"}
#: bytes scanned at a time for line ends (a CSV's partition plan)
SCAN_BLOCK = 1 << 24
#: only an empty cell is missing: ``n/a`` or ``NaN`` in a number column is reported as the text it is
NA = {"keep_default_na": False, "na_values": [""]}


def table_format(path: Path, what: str = "--input") -> str:
    """``"csv"``, ``"csv.gz"`` or ``"parquet"`` from the file name, or an :class:`InputError` naming ``what``."""
    fmt = READ_FORMATS.get(path.suffix.lower())
    if fmt == "csv.gz" and not path.name.lower().endswith(".csv.gz"):
        fmt = None
    if fmt is None:
        raise InputError(f"{what} {path.name}: not a table this reads; name a .csv, .csv.gz or .parquet file",
                         field=what, expected=".csv | .csv.gz | .parquet", received=path.suffix or path.name)
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist", field=what, expected="an existing file", received=str(path))
    return fmt


def separator(path: Path, fmt: str) -> str:
    """A CSV's separator (sniffed among ``, ; tab |``; ``,`` when unsure or for Parquet)."""
    if fmt == "parquet":
        return ","
    from training.data.datasets import sniff_separator

    return sniff_separator(path) or ","


def header(path: Path, fmt: str) -> list[str]:
    """The column names of a table."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return [str(n) for n in pq.ParquetFile(path).schema_arrow.names]
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            raise InputError(f"{path} could not be read as Parquet: {exc}", field="--input",
                             expected="a Parquet file", received=path.name) from None
    opener = gzip.open if fmt == "csv.gz" else open
    try:
        with opener(path, "rt", newline="", encoding="utf-8-sig") as f:
            line = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} could not be read as CSV text: {exc}", field="--input", expected="CSV text",
                         received=path.name) from None
    import csv

    names = next(csv.reader([line], delimiter=separator(path, fmt)), [])
    names = [n.strip() for n in names]
    if not names or not any(names):
        raise InputError(f"{path} is empty: it needs a header row naming its columns", field="--input",
                         expected="a header row", received="nothing")
    return names


def require_columns(path: Path, names: list[str], wanted: dict[str, list[str]]) -> None:
    """An :class:`InputError` naming the first role (``"feature"``, ``"target"``, ...) whose columns the table
    lacks, which ones, and the columns it has."""
    have = set(names)
    for role, columns in wanted.items():
        missing = [c for c in columns if c not in have]
        if missing:
            shown = ", ".join(repr(c) for c in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            listed = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
            raise InputError(f"{path.name} lacks the {role} column(s) {shown}; it has {listed}", field=missing[0],
                             expected=f"a {role} column named {missing[0]}", received=f"columns {listed}")


@dataclass(frozen=True)
class Partition:
    """Rows ``[first_row, first_row + n_rows)`` of a table: for a CSV the bytes ``[start, end)`` that hold them."""

    path: str
    fmt: str
    first_row: int
    n_rows: int
    start: int = 0
    end: int = 0

    def line(self, r: int) -> str:
        """Where row ``r`` of this partition is in the file, in words."""
        row = self.first_row + r
        return f"row {row + 1}" if self.fmt == "parquet" else f"line {row + 2}"


def plan(path: Path, fmt: str, rows: int) -> list[Partition]:
    """The partitions of ``rows`` data rows (the last may be shorter) of a CSV or Parquet file (not gzip)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        total = pq.ParquetFile(path).metadata.num_rows
        return [Partition(str(path), fmt, a, min(rows, total - a)) for a in range(0, total, rows)]
    if fmt != "csv":
        raise InputError(f"{path.name}: a gzip CSV cannot be split among workers; decompress it or convert it "
                         "to Parquet", field="--input", expected=".csv or .parquet", received=path.name)
    return [Partition(str(path), fmt, first, n, start, end) for first, n, start, end in _line_ranges(path, rows)]


def _line_ranges(path: Path, rows: int) -> list[tuple[int, int, int, int]]:
    """``(first row, rows, start byte, end byte)`` per ``rows`` data lines of a CSV: the line ends are found
    block by block with numpy, and every ``rows``-th one after the header's starts a partition."""
    starts, seen, offset, last = [], 0, 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(SCAN_BLOCK):
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            number = np.arange(seen, seen + ends.size)  # end 0 is the header's; data line k starts after end k
            starts.extend((offset + ends[number % rows == 0] + 1).tolist())
            seen, offset, last = seen + ends.size, offset + len(block), block[-1:]
    total = max(seen - 1 + (last != b"\n"), 0)  # a last line without a newline counts too
    out = []
    for i, first in enumerate(range(0, total, rows)):
        out.append((first, min(rows, total - first), starts[i], starts[i + 1] if i + 1 < len(starts) else offset))
    return out


def read_partition(part: Partition, names: list[str], columns: list[str], sep: str = ","):
    """The ``columns`` of a partition as a pandas DataFrame (as text or numbers, unchecked)."""
    import pandas as pd

    if part.fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(part.path)
        meta, end = pf.metadata, part.first_row + part.n_rows
        groups, row = [], 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            if row < end and row + n > part.first_row:
                groups.append((g, row))
            row += n
        table = pa.concat_tables([pf.read_row_group(g, columns=columns) for g, _ in groups])
        skip = part.first_row - groups[0][1]
        return table.slice(skip, part.n_rows).to_pandas()
    with open(part.path, "rb") as f:
        f.seek(part.start)
        data = f.read(part.end - part.start)
    try:
        # every column parsed (``usecols`` would silently drop a row's extra cells), then the wanted ones kept
        return pd.read_csv(io.BytesIO(data), sep=sep, header=None, names=names, skip_blank_lines=False,
                           **NA)[columns]
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        where = f"{part.line(0)} to {part.line(part.n_rows - 1)}"
        raise InputError(f"{Path(part.path).name}: {where} could not be parsed as CSV ({exc}); every line needs "
                         f"the header's {len(names)} cells", field="--input", expected=f"{len(names)} cells a line",
                         received=str(exc)[:80]) from None


def stream(path: Path, fmt: str, names: list[str], columns: list[str], rows: int) -> Iterator[tuple[Partition, object]]:
    """``(partition, frame)`` of ``rows`` rows at a time, in file order, one frame in memory at a time."""
    sep = separator(path, fmt)
    if fmt == "csv.gz":
        import pandas as pd

        first = 0
        reader = pd.read_csv(path, sep=sep, header=0, names=names, chunksize=rows, skip_blank_lines=False, **NA)
        while True:
            try:
                frame = next(reader)
            except StopIteration:
                return
            except (pd.errors.ParserError, UnicodeDecodeError) as exc:
                raise InputError(f"{path.name}: after line {first + 1} the file could not be parsed as CSV ({exc})",
                                 field="--input", expected=f"{len(names)} cells a line", received=str(exc)[:80]) from None
            yield Partition(str(path), fmt, first, len(frame)), frame[columns]
            first += len(frame)
    for part in plan(path, fmt, rows):
        yield part, read_partition(part, names, columns, sep)


def numeric(frame, columns: list[str], part: Partition, file: str) -> np.ndarray:
    """``frame[columns]`` as a float64 (N, len(columns)) array, every cell a finite number; else an
    :class:`InputError` naming the column, the line (or Parquet row) and what it holds."""
    import pandas as pd

    sub = frame[columns]
    if all(dt.kind in "iuf" for dt in sub.dtypes):  # the common case: one conversion, one check
        out = sub.to_numpy(np.float64)
        if np.isfinite(out).all():
            return out
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):  # find the first bad cell, column by column
        raw = frame[col]
        values = raw.to_numpy(np.float64, na_value=np.nan) if pd.api.types.is_numeric_dtype(raw) \
            else pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            cell = raw.iloc[r]
            if isinstance(cell, str):
                what = f"holds {cell!r}"
            else:
                what = "is empty" if pd.isna(cell) else f"holds {float(cell)!r}"
            kind = "a finite number" if pd.notna(cell) and not isinstance(cell, str) else "a number"
            raise InputError(f"{file}: column {col!r} {what} at {part.line(r)}; every cell of it must be {kind}",
                             field=col, expected=kind, received=f"{str(cell)[:40]!r} at {part.line(r)}")
        out[:, j] = values
    return out


def labels(frame, column: str, part: Partition, file: str) -> np.ndarray:
    """``frame[column]`` as per-row labels (any type), none of them empty."""
    values = frame[column]
    empty = values.isna().to_numpy()
    if empty.any():
        r = int(np.flatnonzero(empty)[0])
        raise InputError(f"{file}: column {column!r} is empty at {part.line(r)}; every row needs a label",
                         field=column, expected="a label on every row", received=f"an empty cell at {part.line(r)}")
    return values.to_numpy()
