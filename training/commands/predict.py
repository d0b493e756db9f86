"""``lmve-predict``: a whole log of readings scored offline, in partitions of bounded memory, here or on Dask.

    lmve-predict --bundle runs/site7/bundle --input readings.csv --out regions.parquet
    lmve-predict --bundle B --input log.parquet --out regions.parquet --engine dask --scheduler tcp://10.0.0.5:8786

Each row gets what ``POST /predict-region`` answers for it (the columns of :data:`models.answers.FIELDS`):
``center_<target>``, the shape's upper triangle (``shape_00``, ``shape_01``, ``shape_11``, ...), ``area``, the
accuracy radius (``accuracy_m`` and ``area_m2`` with a CRS, ``accuracy`` without), ``method``, ``typicality`` with
the step, and for a floor bundle ``floor`` (and ``building``), ``floor_probability``, ``floor_set`` (``;``-separated,
most probable first) and its size. ``--contains X,Y`` adds ``inside``, ``distance``, ``p_value``. Every other
input column is carried through first, in the input's order (``--keep COL[,COL]`` or ``--keep none``
instead); one whose name an answer column has is written as ``input_<name>``.

The input is read in partitions of ``--chunk-rows`` rows (:mod:`training.data.tables`), each answered as one
batch and appended to the output (Parquet, CSV or GeoJSON, by suffix). ``--engine dask`` sends the same
partitions to a Dask cluster (``--scheduler ADDR``, or ``--workers`` local processes): each worker reads its
partitions from the shared file system and loads the bundle once, and the client writes the answers in
order, so both engines write the same rows, to the last bit (both answer with BLAS and OpenMP on one thread,
:data:`KERNEL_THREADS`; workers on another CPU round as its kernels do). Nothing is written unless everything is: the
output appears by rename, and a bad cell (named by column and line) leaves no file behind."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models import answers
from models.exceptions import InputError
from training import run_command
from training.commands.inputs import bundle_parser
from training.commands.predict_output import WRITE_FORMATS, Writer
from training.data import tables

#: rows per partition (and per batch) unless --chunk-rows says otherwise
CHUNK_ROWS = 4096
#: partitions in flight per Dask worker (the client holds at most this many answers per worker)
IN_FLIGHT = 2


def build_parser() -> argparse.ArgumentParser:
    p = bundle_parser("lmve-predict", __doc__)
    p.add_argument("--input", type=Path, required=True, help="readings with the bundle's feature columns by name "
                   "(.csv, .csv.gz, .parquet)")
    p.add_argument("--out", type=Path, required=True, help="regions.parquet, regions.csv or regions.geojson")
    p.add_argument("--method", default=None, help="one method (default: the one /predict-region serves)")
    p.add_argument("--contains", default=None, metavar="X,Y", help="columns of points to test against each region")
    p.add_argument("--keep", default=None, metavar="COL[,COL]|none",
                   help="input columns copied to the output (default: every column that is not a feature or a "
                        "target; none: no column)")
    p.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, help=f"rows per partition (default {CHUNK_ROWS})")
    p.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="local: partitions one after the other here; dask: on a Dask cluster")
    p.add_argument("--scheduler", default=None, metavar="ADDR", help="a Dask scheduler (default: a local cluster)")
    p.add_argument("--workers", type=int, default=2, help="worker processes of the local Dask cluster (default 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-predict", build_parser(), _run, argv)


# ----------------------------------------------------------------------------- one partition's answers
#: BLAS and OpenMP threads a partition is answered with, in both engines: a Dask worker runs them on one
#: (``distributed.nanny.pre-spawn-environ``), and a BLAS may choose another kernel for one thread than for
#: several (OpenBLAS's small-matrix path on AVX-512), which rounds otherwise: the same rows would then differ
#: in their last bits between the engines
KERNEL_THREADS = 1


@dataclass(frozen=True)
class Job:
    """What every partition is answered with: the bundle (its model loaded once per process) and the options."""

    bundle: str
    model_name: str | None
    method: str | None
    contains: tuple[str, ...]
    keep: tuple[str, ...]
    file: str

    @property
    def model(self):
        return _model(self.bundle, self.model_name)

    def columns(self) -> list[str]:
        from training.commands.inputs import centre_columns

        m = self.model
        return list(dict.fromkeys([*m.feature_names, *centre_columns(m), *self.contains, *self.keep]))

    def answer(self, part: tables.Partition, frame) -> dict[str, np.ndarray]:
        """The output columns of one partition's rows (one batch), computed with BLAS and OpenMP on one thread
        (:data:`KERNEL_THREADS`) in both engines."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=KERNEL_THREADS):
            return self._answer(part, frame)

    def _answer(self, part: tables.Partition, frame) -> dict[str, np.ndarray]:
        from training.commands.inputs import centre_columns

        model = self.model
        X = tables.numeric(frame, list(model.feature_names), part, self.file)
        estimate = centre_columns(model)
        centers = tables.numeric(frame, estimate, part, self.file) if estimate else None
        answer = model.predict_region(X, self.method, kind="ellipsoid", centers=centers)
        out = answers.columns(answers.Batch(answer, model), answers.REGION)
        if self.contains:
            P = tables.numeric(frame, list(self.contains), part, self.file)
            a = model.assess(X, P, self.method, kind="ellipsoid", centers=centers, typicality=False)
            out.update(answers.columns(answers.Batch(a, model), answers.CONTAINS))
        kept = {(f"input_{c}" if c in out else c): frame[c].to_numpy() for c in self.keep}
        return {**kept, **out}

    def frame(self, part: tables.Partition, names: list[str], sep: str):
        """A partition read and answered: a pandas DataFrame (what a Dask partition holds)."""
        import pandas as pd

        return pd.DataFrame(self.answer(part, tables.read_partition(part, names, self.columns(), sep)))


_MODELS: dict = {}
_MODELS_LOCK = threading.Lock()
#: bundles this process has loaded (a Dask worker: once per bundle, whatever its number of partitions)
LOADS: list[str] = []


def _model(bundle: str, name: str | None):
    """The bundle's model, loaded once per process (a Dask worker's tasks share it); reloaded when the bundle's
    manifest changes."""
    stamp = _stamp(bundle, name)
    key = (bundle, name)
    with _MODELS_LOCK:
        hit = _MODELS.get(key)
        if hit is None or hit[0] != stamp:
            from training.commands.inputs import open_model

            hit = (stamp, open_model(Path(bundle), name))
            _MODELS[key] = hit
            LOADS.append(str(Path(bundle) / name if name else Path(bundle)))
        return hit[1]


def _answer_partition(part: tables.Partition, job: Job, names: list[str], sep: str):
    return job.frame(part, names, sep)


# ----------------------------------------------------------------------------- the command
def _split(text: str | None) -> list[str]:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def _run(args) -> int:
    from training.commands.inputs import centre_columns, open_model

    fmt_out = WRITE_FORMATS.get(args.out.suffix.lower())
    if fmt_out is None:
        raise InputError(f"--out {args.out.name}: name a .parquet, .csv or .geojson file", field="--out",
                         expected=".parquet | .csv | .geojson", received=args.out.suffix or args.out.name)
    if args.chunk_rows < 1:
        raise InputError(f"--chunk-rows {args.chunk_rows}: expected a positive number of rows", field="--chunk-rows",
                         expected=">= 1", received=str(args.chunk_rows))
    if args.out.resolve() == args.input.resolve():
        raise InputError("--out must differ from --input", field="--out", expected="a new file", received=str(args.out))
    model = open_model(args.bundle, args.model)
    contains = _split(args.contains)
    if contains and len(contains) != model.n_targets:
        raise InputError(f"--contains names {len(contains)} columns; the bundle has {model.n_targets} targets "
                         f"({', '.join(model.target_names)})", field="--contains",
                         expected=f"{model.n_targets} columns", received=",".join(contains))
    if args.method is not None and args.method not in model.serving_order:
        raise InputError(f"--method {args.method}: the bundle serves {', '.join(model.serving_order)}",
                         field="--method", expected=" | ".join(model.serving_order), received=args.method)
    fmt_in = tables.table_format(args.input, "--input")
    names = tables.header(args.input, fmt_in)
    keep = _kept(args.keep, names, model)
    tables.require_columns(args.input, names, {"feature": list(model.feature_names), "estimate": centre_columns(model),
                                               "--contains": contains, "--keep": keep})
    job = Job(str(args.bundle), args.model, args.method, tuple(contains), tuple(keep), args.input.name)
    _MODELS[(str(args.bundle), args.model)] = (_stamp(str(args.bundle), args.model), model)
    writer = Writer(args.out, fmt_out, model)
    try:
        if args.engine == "dask":
            rows = _run_dask(args, job, fmt_in, names, writer)
        else:
            rows = _run_local(args, job, fmt_in, names, writer)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    print(f"lmve-predict: {rows} rows -> {args.out}")
    return 0


def _kept(text: str | None, names: list[str], model) -> list[str]:
    """The input columns carried to the output: ``--keep`` 's list, none for ``none``, and by default every
    column of the header ``names`` that is not a feature or a target of ``model``."""
    if text is None:
        skip = {*model.feature_names, *model.target_names}
        return [c for c in names if c not in skip]
    if text.strip().lower() == "none":
        return []
    return _split(text)


def _stamp(bundle, name: str | None):
    """The bundle's manifest's modification time (a rewritten bundle is loaded again), or None."""
    from models.bundle import MANIFEST

    root = Path(bundle) / name if name else Path(bundle)
    return os.stat(root / MANIFEST).st_mtime_ns if (root / MANIFEST).is_file() else None


def _bar(args, total: int | None):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="rows", unit_scale=True, desc="lmve-predict", disable=args.no_progress,
                file=sys.stderr)


def _run_local(args, job: Job, fmt: str, names: list[str], writer: Writer) -> int:
    total = None
    if fmt == "parquet":
        import pyarrow.parquet as pq

        total = pq.ParquetFile(args.input).metadata.num_rows
    with _bar(args, total) as bar:
        for part, frame in tables.stream(args.input, fmt, names, job.columns(), args.chunk_rows):
            writer.write(job.answer(part, frame))
            bar.update(len(frame))
    return writer.rows


def _run_dask(args, job: Job, fmt: str, names: list[str], writer: Writer) -> int:
    """The partitions as a ``dask.dataframe`` (``from_map``) answered on the cluster; the client writes them in
    order, at most :data:`IN_FLIGHT` per worker at a time."""
    import dask.dataframe as dd

    from training.commands.cluster import dask_client

    parts = tables.plan(args.input, fmt, args.chunk_rows)
    if not parts:
        raise InputError(f"{args.input.name} has a header but no rows", field="--input", expected="rows",
                         received="0 rows")
    sep = tables.separator(args.input, fmt)
    meta = job.frame(parts[0], names, sep).iloc[:0]  # the columns and types (one partition answered here)
    ddf = dd.from_map(_answer_partition, parts, job=job, names=names, sep=sep, meta=meta, enforce_metadata=False)
    with dask_client(args.scheduler, args.workers) as client:
        workers = max(len(client.scheduler_info()["workers"]), 1)
        window = IN_FLIGHT * workers
        pieces = ddf.to_delayed()
        with _bar(args, sum(p.n_rows for p in parts)) as bar:
            futures = [client.compute(p) for p in pieces[:window]]
            for i in range(len(pieces)):
                frame = futures[i].result()
                futures[i] = None
                if i + window < len(pieces):
                    futures.append(client.compute(pieces[i + window]))
                writer.write({c: frame[c].to_numpy() for c in frame.columns})
                bar.update(len(frame))
    return writer.rows


if __name__ == "__main__":  # pragma: no cover
    from training.commands.predict import main as _main  # Dask workers unpickle training.commands.predict's classes, not __main__'s

    sys.exit(_main())
