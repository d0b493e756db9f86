"""``lmve-train --split-by COL --out repo/``: one calibrated bundle per value of a column, as a model repository.

A site surveyed building by building trains one model per building in one command::

    lmve-train --dataset indoor_localization --split-by BUILDINGID --out repo/
    lmve-serve --model-repository repo/

writes ``repo/BUILDINGID=0/``, ``repo/BUILDINGID=1/``, ... (each a bundle: what ``lmve-serve`` serves as the
model of that name; ``--split-names 0=west,1=east`` names them instead), their reports under
``repo/reports/<name>/``, and ``repo/repository.json``: the column, the source, and per model its value,
rows, bundle id, served method and guarantee (models that could not be trained are listed under
``failed`` with the reason, and the command exits 1). Each value's rows are trained alone, exactly as
``lmve-train`` trains a whole file: split, centre, shapes, calibration. Every bundle and the manifest are
written atomically; a model that fails leaves the others.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from models.bundle import REPOSITORY_MANIFEST, write_file_atomic
from models.exceptions import InputError, LMVEError
from training.data.datasets import Dataset, subset


def parse_names(text: str | None) -> dict[str, str]:
    """``"0=west,1=east"`` -> ``{"0": "west", "1": "east"}`` (``--split-names``)."""
    out: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        value, sep, name = pair.partition("=")
        if not sep or not value.strip() or not name.strip():
            raise InputError(f"--split-names: {pair.strip()!r} is not VALUE=NAME", field="--split-names",
                             expected="VALUE=NAME[,VALUE=NAME...]", received=pair.strip())
        out[value.strip()] = name.strip()
    return out


def value_text(value) -> str:
    """A column value as a model name writes it (``1.0`` -> ``"1"``)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def model_name(column: str, value: str, names: dict[str, str]) -> str:
    """``names[value]``, else ``<column>=<value>``; refused when it cannot be a directory or a URL segment."""
    name = names.get(value, f"{column}={value}")
    if not name or "/" in name or "\\" in name or name.startswith((".", "_")) or ".recal-" in name:
        raise InputError(f"model name {name!r} (value {value!r} of {column}) cannot name a model directory",
                         field="--split-names", expected="a name without '/', not starting with '.' or '_'",
                         received=name)
    return name


def split_values(dataset: Dataset, column: str) -> list[tuple[str, np.ndarray]]:
    """``(value, row mask)`` per distinct value of the label column ``column``, in sorted order."""
    if column not in dataset.meta:
        known = ", ".join(dataset.meta) or "none"
        raise InputError(f"--split-by {column}: {dataset.name} has no such label column; it has {known}",
                         field="--split-by", expected=" | ".join(dataset.meta) or "a label column",
                         received=column)
    labels = np.asarray(dataset.meta[column])
    texts = np.array([value_text(v) for v in labels.tolist()], dtype=object)
    values = sorted(set(texts.tolist()), key=lambda v: (not _is_number(v), float(v) if _is_number(v) else 0.0, v))
    return [(v, texts == v) for v in values]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_manifest(out: Path, manifest: dict) -> Path:
    """``out/repository.json``, written to a temporary file first and renamed over the old one."""
    write_file_atomic(out / REPOSITORY_MANIFEST, json.dumps(manifest, indent=2).encode())
    return out / REPOSITORY_MANIFEST


def plan_sites(dataset: Dataset, column: str, names: dict[str, str] | None = None
               ) -> list[tuple[str, np.ndarray, str]]:
    """``(value, row mask, model name)`` per value of ``column``; an :class:`InputError` naming
    ``--split-names`` when it names a value the column does not hold or gives two values one name."""
    names = names or {}
    parts = split_values(dataset, column)
    unknown = sorted(set(names) - {v for v, _ in parts})
    if unknown:
        raise InputError(f"--split-names names value(s) {', '.join(unknown)} that {column} does not hold; it holds "
                         f"{', '.join(v for v, _ in parts)}", field="--split-names",
                         expected=" | ".join(v for v, _ in parts), received=", ".join(unknown))
    planned = [(v, mask, model_name(column, v, names)) for v, mask in parts]
    clash = sorted({n for _, _, n in planned if [m for _, _, m in planned].count(n) > 1})
    if clash:
        raise InputError(f"--split-names gives two values the name(s) {', '.join(clash)}", field="--split-names",
                         expected="one name per value", received=", ".join(clash))
    return planned


def new_manifest(column: str, source: str) -> dict:
    """The repository manifest before any model: ``models`` and ``failed`` fill as models finish."""
    return {"schema": 1, "split_by": column, "source": source,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "models": {}, "failed": {}}


def record(manifest: dict, name: str, value: str, rows: int, entry: dict | None = None,
           reason: str | None = None) -> None:
    """One model's line of the manifest: under ``models`` with its ``entry``, or under ``failed`` with the
    ``reason`` it could not be trained."""
    if reason is None:
        manifest["models"][name] = {"value": value, "rows": rows, **entry}
    else:
        manifest["failed"][name] = {"value": value, "rows": rows, "reason": reason}


def site_rows(dataset: Dataset, column: str, value: str, mask: np.ndarray) -> Dataset:
    """The rows of one model, named after their value."""
    return subset(dataset, mask, name=f"{dataset.name} {column}={value}")


def train_repository(dataset: Dataset, column: str, out: Path, train_one: Callable[[Dataset, str], dict], *,
                     names: dict[str, str] | None = None, source: str = "", progress: bool = True) -> dict:
    """Train one model per value of ``column`` with ``train_one(rows, name) -> entry`` (it writes the bundle
    ``out/<name>``), one after the other under one progress bar; write and return the repository manifest
    (a model that fails with an :class:`LMVEError` is listed under ``failed`` with the reason)."""
    from tqdm.auto import tqdm

    planned = plan_sites(dataset, column, names)
    manifest = new_manifest(column, source)
    bar = tqdm(planned, desc=f"models by {column}", unit="model", disable=not progress)
    for value, mask, name in bar:
        bar.set_postfix_str(f"{name} ({int(mask.sum())} rows)")
        try:
            entry = train_one(site_rows(dataset, column, value, mask), name)
        except LMVEError as exc:  # too few rows, too few groups...: this model only
            record(manifest, name, value, int(mask.sum()), reason=str(exc))
            continue
        record(manifest, name, value, int(mask.sum()), entry=entry)
    bar.close()
    write_manifest(out, manifest)
    return manifest
