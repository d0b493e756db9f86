"""A Parquet file read by column, a few columns at a time, for the training loader."""

from __future__ import annotations

from pathlib import Path

#: columns :class:`ParquetColumns` reads at a time
PARQUET_BATCH = 16


class ParquetColumns:
    """A Parquet file's columns as a frame's ``columns``, ``len`` and ``frame[col]`` (a Series), read
    :data:`PARQUET_BATCH` columns at a time as they are asked for (the asked column and those after it):
    :func:`training.data.datasets.load_csv` copies a few columns at a time into its matrices, so the whole
    table is never in memory beside them."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self._file = pq.ParquetFile(path)
        meta = self._file.schema_arrow.pandas_metadata or {}
        index = {c for c in meta.get("index_columns", []) if isinstance(c, str)}  # a frame's stored index
        self.columns = [c for c in self._file.schema_arrow.names if c not in index]
        self._batch = None

    def __len__(self) -> int:
        return self._file.metadata.num_rows

    def __getitem__(self, col: str):
        if self._batch is None or col not in self._batch:
            import pyarrow as pa

            at = self.columns.index(col)
            pool = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())  # Arrow's own pool would keep what it frees
            try:
                table = self._file.read(columns=self.columns[at:at + PARQUET_BATCH])
                self._batch = {name: table.column(name).to_pandas() for name in table.column_names}
            finally:
                pa.set_memory_pool(pool)
        return self._batch[col]
