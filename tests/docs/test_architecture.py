"""``docs/concepts/architecture.md`` lists every module of ``models/``, ``service/`` and ``training/``, and
names no module that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "concepts" / "architecture.md"
PACKAGES = ("models", "service", "training")


def modules_on_disk() -> set[str]:
    """Every module file of the three packages (package markers aside), as ``models/centres/gp.py``."""
    return {p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def modules_on_page(text: str) -> set[str]:
    """Every module path the page names in backticks (``models/centres/gp.py``)."""
    return set(re.findall(r"`((?:models|service|training)/[\w/]+\.py)`", text))


def test_every_module_is_on_the_architecture_page():
    on_page, on_disk = modules_on_page(PAGE.read_text()), modules_on_disk()
    assert not on_disk - on_page, f"modules missing from {PAGE.name}: {sorted(on_disk - on_page)}"
    stale = {m for m in on_page - on_disk if not (ROOT / m).is_file()}  # a package's __init__.py may be named
    assert not stale, f"{PAGE.name} names modules that do not exist: {sorted(stale)}"


def test_the_page_reader_finds_paths_in_backticks_only():
    text = "- `models/geo.py`: x; `service/routers/v2.py` and models/bundle.py, `models/centres/`"
    assert modules_on_page(text) == {"models/geo.py", "service/routers/v2.py"}
