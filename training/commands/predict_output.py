"""``lmve-predict``'s output: answered partitions appended to a Parquet, CSV or GeoJSON file (by suffix)
through a temporary sibling, renamed into place only when every row is written."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from models.exceptions import InputError

#: the output formats, by the output file's suffix
WRITE_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".geojson": "geojson", ".json": "geojson"}


class Writer:
    """Appends answered partitions to ``path`` through a temporary sibling, renamed into place by :meth:`close`
    (:meth:`abort` deletes it: no partial output)."""

    def __init__(self, path: Path, fmt: str, model):
        self.path, self.fmt, self.model = path, fmt, model
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
        self._parquet = None
        self._file = None
        self.rows = 0

    def write(self, cols: dict) -> None:
        import pandas as pd

        frame = pd.DataFrame(cols)
        if self.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(frame, preserve_index=False)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self.tmp, table.schema)
            self._parquet.write_table(table.cast(self._parquet.schema))
        elif self.fmt == "csv":
            if self._file is None:
                self._file = open(self.tmp, "w", newline="")
            frame.to_csv(self._file, header=self.rows == 0, index=False)
        else:
            self._geojson(cols)
        self.rows += len(frame)

    def _geojson(self, cols: dict) -> None:
        import orjson

        from models.geo import ellipse_figures

        if self._file is None:
            self._file = open(self.tmp, "wb")
            self._file.write(b'{"type":"FeatureCollection","features":[')
        n = self.model.n_targets
        centers = np.column_stack([cols[f"center_{t}"] for t in self.model.target_names])
        shapes = np.empty((len(centers), n, n))
        for i in range(n):
            for j in range(i, n):
                shapes[:, i, j] = shapes[:, j, i] = cols[f"shape_{i}{j}"]
        bounded = np.isfinite(shapes).all(axis=(1, 2))
        rings = [None] * len(centers)
        if bounded.any():
            figures = ellipse_figures(centers[bounded], shapes[bounded], self.model.crs)
            for k, i in enumerate(np.flatnonzero(bounded).tolist()):
                rings[i] = figures["ring"][k].tolist()
        skip = {f"shape_{i}{j}" for i in range(n) for j in range(i, n)}
        names = [c for c in cols if c not in skip]
        values = {c: np.asarray(cols[c]).tolist() for c in names}
        for i in range(len(centers)):
            props = {"row": self.rows + i, **{c: _plain(values[c][i]) for c in names}}
            geometry = None if rings[i] is None else {"type": "Polygon", "coordinates": [rings[i]]}
            sep = b"," if self.rows + i else b""
            self._file.write(sep + orjson.dumps({"type": "Feature", "geometry": geometry, "properties": props}))

    def close(self) -> None:
        if self.fmt == "geojson":
            if self._file is None:
                self._file = open(self.tmp, "wb")
                self._file.write(b'{"type":"FeatureCollection","features":[')
            coords = "lonlat" if self.model.crs is not None else "plane"
            self._file.write(b'],"coordinates":"' + coords.encode() + b'"}')
        if self._parquet is not None:
            self._parquet.close()
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        if self.rows == 0:
            raise InputError("the input has a header but no rows", field="--input", expected="rows", received="0 rows")
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        try:
            if self._parquet is not None:
                self._parquet.close()
            if self._file is not None:
                self._file.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def _plain(v):
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v
