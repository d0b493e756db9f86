"""What ``lmve-evaluate`` and ``lmve-predict`` open: a bundle (or one model of a model repository) and a walk.

:func:`open_model` takes a bundle directory, or a repository directory with ``--model NAME`` (the only model
when there is one). :func:`read_walk` reads a labelled table (CSV or Parquet, :mod:`training.data.tables`) with the
bundle's own column names: its features, targets, the client's estimate columns for a client-centre bundle,
a floor bundle's floor (and building) columns, and the ``--group-by`` columns; a bad cell is named by its
column and line and nothing is evaluated.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from models.bundle import MANIFEST, REPOSITORY_MANIFEST
from models.exceptions import InputError

if TYPE_CHECKING:  # types only: opening a bundle needs neither pandas nor the walk's figures (lmve-plan)
    from training.figures.walk import GroupBy, Walk

#: rows read per partition of a walk
WALK_ROWS = 65536


def bundle_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A command's parser from its module ``doc`` (first paragraph: the description; the rest: the epilog) with
    ``--bundle`` and ``--model``, which :func:`open_model` reads."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0], epilog="\n\n".join(doc.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, required=True, help="a bundle directory, or a model repository (--model)")
    p.add_argument("--model", default=None, help="the model of a repository (default: its only one)")
    return p


def open_model(path: Path, name: str | None = None):
    """The :class:`~models.model.RegionModel` of bundle ``path``, or of model ``name`` of repository ``path``."""
    from models.bundle import load_bundle

    path = Path(path)
    if (path / MANIFEST).is_file():
        if name is not None:
            raise InputError(f"--model {name}: {path} is a bundle, not a model repository; leave --model out",
                             field="--model", expected="no --model for a bundle", received=name)
        return load_bundle(path)
    if not path.is_dir():
        raise InputError(f"--bundle {path} does not exist", field="--bundle", expected="a bundle or model repository",
                         received=str(path))
    models = sorted(p.name for p in path.iterdir() if p.is_dir() and (p / MANIFEST).is_file()
                    and not p.name.startswith((".", "_")) and ".recal-" not in p.name)
    if not models:
        what = "a model repository's manifest but no bundle" if (path / REPOSITORY_MANIFEST).is_file() else "no bundle"
        raise InputError(f"--bundle {path} holds {what} (no manifest.json in it or its subdirectories)",
                         field="--bundle", expected="a bundle or model repository", received=str(path))
    if name is None:
        if len(models) > 1:
            raise InputError(f"--bundle {path} is a repository of {len(models)} models; name one with --model: "
                             f"{', '.join(models)}", field="--model", expected=" | ".join(models), received="none")
        name = models[0]
    if name not in models:
        raise InputError(f"--model {name}: the repository {path} has no such model; it has {', '.join(models)}",
                         field="--model", expected=" | ".join(models), received=name)
    return load_bundle(path / name)


def centre_columns(model) -> list[str]:
    """The estimate columns a client-centre bundle needs in every row (none for the others)."""
    if not model.requires_centers:
        return []
    centre = (model.manifest.get("training") or {}).get("centre")
    columns = centre.get("columns") if isinstance(centre, dict) else None
    return list(columns) if columns else [f"center_{t}" for t in model.target_names]


def read_walk(path: Path, model, group_by: list[GroupBy] = ()) -> Walk:
    """A labelled walk read with ``model``'s column names (:mod:`training.data.tables` names a missing column, and a bad
    cell's column and line); a floor bundle's walk needs its floor (and building) columns: its guarantee, and so
    its evaluation and recalibration, are joint."""
    from training.data import tables
    from training.data.location import hash_files
    from training.figures.walk import Walk

    path = Path(path)
    fmt = tables.table_format(path, "--csv")
    names = tables.header(path, fmt)
    estimate = centre_columns(model)
    floor_cols = list(model.floors.labels.columns) if model.floors is not None else []
    tables.require_columns(path, names, {"feature": list(model.feature_names), "target": list(model.target_names),
                                         "estimate": estimate, "floor": floor_cols,
                                         "group": [g.column for g in group_by]})
    numeric_cols = [*model.feature_names, *model.target_names, *estimate]
    label_cols = list(dict.fromkeys([*floor_cols, *(g.column for g in group_by)]))
    columns = list(dict.fromkeys([*numeric_cols, *label_cols]))
    blocks, labels = [], {c: [] for c in label_cols}
    for part, frame in tables.stream(path, fmt, names, columns, WALK_ROWS):
        blocks.append(tables.numeric(frame, numeric_cols, part, path.name))
        for c in label_cols:
            labels[c].append(tables.labels(frame, c, part, path.name))
    if not blocks or sum(len(b) for b in blocks) == 0:
        raise InputError(f"{path.name} has a header but no rows", field="--csv", expected="labelled rows",
                         received="0 rows")
    A = np.concatenate(blocks)
    lab = {c: np.concatenate(v) for c, v in labels.items()}
    d, n = model.n_features, model.n_targets
    walk = Walk(name=path.name, sha256=hash_files(path), X=A[:, :d], Y=A[:, d:d + n],
                centers=A[:, d + n:] if estimate else None, where=("row", 1) if fmt == "parquet" else ("line", 2))
    if floor_cols:
        walk.floors = lab[floor_cols[-1]]
        walk.buildings = lab[floor_cols[0]] if len(floor_cols) == 2 else None
    walk.groups = {g.name: g.labels(lab[g.column]) for g in group_by}
    return walk


def derived_parser(prog: str, doc: str, verb: str, rows: str, groups: str) -> argparse.ArgumentParser:
    """The arguments of a command that derives a new bundle from a bundle and labelled rows: ``bundle``,
    ``csv`` (``rows`` says what it holds), ``--out`` and ``--groups`` (``groups`` says what a group is for)."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", type=Path, help=f"the bundle to {verb} (left untouched)")
    p.add_argument("csv", type=Path, help=rows)
    p.add_argument("--out", type=Path, required=True, help="where the new bundle goes (a new directory)")
    p.add_argument("--groups", default=None, metavar="COL[,COL]|none", help=groups)
    return p


def derived_parent(bundle: Path, out: Path, verb: str):
    """The bundle a command derives a new one from, loaded; ``out`` must be another directory (the parent
    stays as it is)."""
    from models.bundle import load_bundle

    if Path(out).resolve() == Path(bundle).resolve():
        raise InputError(f"--out must differ from the bundle being {verb} (it stays as it is)", field="--out",
                         expected="a new directory", received=str(out))
    return load_bundle(bundle)


def read_grouped_walk(path: Path, model, groups: str | None):
    """``(walk, groups, columns)``: a labelled walk read for ``model`` and its rows' groups as a ``--groups``
    value says: ``"auto"`` (:data:`~models.calibration.grouping.AUTO`, the caller groups by position), ``None``
    (``none``: every row its own), or one label per row joined over the named ``columns``."""
    from models.calibration.grouping import AUTO, parse_groups
    from training.figures.walk import GroupBy

    setting = parse_groups(groups, "--groups")
    columns = setting if isinstance(setting, list) else None
    walk = read_walk(path, model, [GroupBy(c) for c in columns or []])
    labels = AUTO if setting == AUTO else None
    if columns:  # one group per combination of the columns' values
        labels = np.asarray(["|".join(parts) for parts in zip(*(walk.groups[c] for c in columns))], dtype=object)
    return walk, labels, columns
