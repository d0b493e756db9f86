"""What every benchmark shares: the checkout's folders and commit, ``--seeds``, files written whole,
cached records, the parallel loop, the command line a result quotes, and the units.

Benchmarks are modules of the ``benchmarks`` package, run from the repository root
(``python -m benchmarks.serving``): they import ``models``, ``training`` and ``service`` as the
checkout has them, and each other through this package, with no path edits. None of it ships in the
wheel (``pyproject.toml`` packages ``models``, ``service`` and ``training`` only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: the repository root (the checkout this package sits in)
ROOT = Path(__file__).resolve().parents[1]
#: committed result files
RESULTS = ROOT / "benchmarks" / "results"
#: cached runs (git-ignored): a rerun resumes from them
CACHE = ROOT / "benchmarks" / "cache"


def variant_dir(out: Path, *parts: str) -> Path:
    """Where a variant run of a benchmark writes: ``<out>/variants/<parts...>`` (the results folder keeps one
    current table per benchmark at its top; earlier tables live in git)."""
    return Path(out).joinpath("variants", *parts)


def cache_dir(name: str) -> Path:
    """The benchmark ``name``'s cache folder, ``benchmarks/cache/<name>`` (made by the first write)."""
    return CACHE / name

#: the paper's data sets and UJIIndoorLoc: ``$LMVE_DATA_DIR``, else ``../shared/datasets`` beside the checkout
DATA_DIR = Path(os.environ.get("LMVE_DATA_DIR", ROOT.parent / "shared" / "datasets"))

#: metres per kilometre: the built-in ``indoor_localization`` loader gives UJIIndoorLoc's positions in km
M_PER_KM = 1e3
#: square metres per square kilometre: its areas and det(C)^1/2 in m^2
M2_PER_KM2 = M_PER_KM**2


def to_m2(dataset: str) -> float:
    """The factor that puts a built-in data set's areas in m^2 (its loader's targets in km: 1e6; else 1)."""
    return M2_PER_KM2 if dataset == "indoor_localization" else 1.0


def commit() -> str:
    """The checkout's commit, flagged when ``models/``, ``service/`` or ``training/`` have uncommitted changes
    (the code a figure measures)."""
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "models", "service", "training"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("+uncommitted changes" if dirty else "")


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """The command line a result quotes: ``python -m benchmarks.<module> <argv>`` (``argv`` defaults to
    this process's arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python -m", f"benchmarks.{module}", *args]).rstrip()


def parse_seeds(text: str) -> list[int]:
    """Split seeds from ``--seeds``: ranges ``A-B`` (inclusive) and single seeds, comma-separated (``0-49``,
    ``0,3,7``, ``0-4,9``); empty parts are skipped."""
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def write_text(path: Path, text: str | bytes) -> None:
    """Write ``path`` whole: a temporary file beside it, then a rename, so a killed run never leaves half a
    file (a cache entry or a result) behind. Creates the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(text, bytes):
        tmp.write_bytes(text)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON takes them (``tolist``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_json(path: Path, obj: Any, indent: int | None = None) -> None:
    """``obj`` as JSON at ``path`` (numpy values as plain ones), written whole (:func:`write_text`)."""
    write_text(path, json.dumps(obj, indent=indent, default=_plain) + ("\n" if indent is not None else ""))


def write_csv(frame, path: Path) -> None:
    """A pandas frame as CSV (no index) at ``path``, written whole."""
    write_text(path, frame.to_csv(index=False))


def write_rows(path: Path, rows: Iterable[dict], columns: Sequence[str], extra: str = "raise") -> None:
    """Dict rows as CSV with the header ``columns`` (the :mod:`csv` module's formatting: floats as ``repr``), written
    whole; ``extra="ignore"`` leaves out a row's keys that are not columns."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction=extra)
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buf.getvalue())


def cached(path: Path, make: Callable[[], T]) -> T:
    """The JSON record at ``path``, or ``make()``'s, written there whole first: how every benchmark resumes."""
    path = Path(path)
    if path.is_file():
        return json.loads(path.read_text())
    record = make()
    write_json(path, record)
    return record


def parallel(fn: Callable[..., T], tasks: Iterable[tuple], jobs: int = 1, desc: str | None = None) -> list[T]:
    """``[fn(*task) for task in tasks]`` over ``jobs`` local processes (joblib's loky backend; one job runs in
    this process), in the tasks' order, with a progress bar named ``desc`` (none when ``desc`` is None).
    Each task is one split or run: give it one thread (``torch.set_num_threads(1)``) so two jobs use two cores."""
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    tasks = list(tasks)
    runs = Parallel(n_jobs=jobs, return_as="generator", backend="loky")(delayed(fn)(*t) for t in tasks)
    return list(tqdm(runs, total=len(tasks), desc=desc, disable=desc is None))


def machine() -> dict:
    """What a timing ran on: cores, the CPU's model name (Linux) and Python's version."""
    import platform
    import re

    cpu = ""
    if Path("/proc/cpuinfo").is_file():
        m = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        cpu = m.group(1) if m else ""
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version()}


def utc_now() -> str:
    """The time a result was made, ISO 8601 in UTC (``2026-11-27T10:00:00Z``)."""
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
