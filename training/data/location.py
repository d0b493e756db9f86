"""Where the data lives: training settings (environment variables with the ``LMVE_`` prefix), the data directory,
and the hash of the files read."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.exceptions import InputError

_REPO_ROOT = Path(__file__).resolve().parents[2]


def default_data_dir() -> Path | None:
    """``../shared/datasets`` beside the repository (or the working directory), when it exists."""
    for base in (_REPO_ROOT, Path.cwd()):
        candidate = (base / ".." / "shared" / "datasets").resolve()
        if candidate.is_dir():
            return candidate
    return None


class TrainingSettings(BaseSettings):
    """Where the paper's datasets live: ``LMVE_DATA_DIR`` (default ``../shared/datasets``)."""

    model_config = SettingsConfigDict(env_prefix="LMVE_")

    data_dir: Path | None = Field(default_factory=default_data_dir, description=(
        "the folder of the paper's datasets (its README lists them); the commands that read them say so when it "
        "is unset"))


def data_dir(given=None) -> Path:
    """The data directory: ``given``, else ``LMVE_DATA_DIR`` (default ``../shared/datasets``); an
    :class:`~models.exceptions.InputError` when there is none or it does not exist."""
    d = Path(given) if given is not None else TrainingSettings().data_dir
    if d is None:
        raise InputError("no data directory: set LMVE_DATA_DIR (or pass data_dir) to the folder holding "
                         "enb/, ble_rssi/, indoor_localization/ and residential_building/")
    if not Path(d).is_dir():
        raise InputError(f"data directory {d} does not exist (LMVE_DATA_DIR)")
    return Path(d)


def need(path: Path) -> Path:
    """``path`` when it is a file, else an :class:`~models.exceptions.InputError` naming it."""
    if not path.is_file():
        raise InputError(f"dataset file {path} is missing; check LMVE_DATA_DIR")
    return path


def hash_files(*paths: Path) -> str:
    """The sha256 of the files' bytes, one after the other (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()
