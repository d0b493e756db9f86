"""Training settings (environment variables with the ``LMVE_`` prefix)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

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
