"""Every code name a docstring of ``models/``, ``service/`` or ``training/`` cites in a role (``:class:``,
``:meth:``, ``:func:``, ...) exists: the docstrings that say what calls what name code that is there."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.docs.names import resolves

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "service", "training")
ROLE = re.compile(r":(class|meth|func|mod|data|attr|exc|obj):`~?([\w.]+)(?:\(\))?`")


def modules() -> list[str]:
    """Every module of the three packages, dotted."""
    out = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                out.append(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    return out


def citations(source: str):
    """``(owner class, object name, role, target)`` for every role in the source's docstrings."""
    tree = ast.parse(source)

    def walk(node, cls):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                owner = child.name if isinstance(child, ast.ClassDef) else cls
                yield child, owner
                yield from walk(child, owner)

    for node, owner in [(tree, None), *walk(tree, None)]:
        for role, target in ROLE.findall(ast.get_docstring(node) or ""):
            yield owner, getattr(node, "name", "<module>"), role, target


@pytest.mark.parametrize("name", modules())
def test_every_role_in_a_docstring_names_code_that_exists(name):
    module = importlib.import_module(name)
    source = Path(module.__file__).read_text(encoding="utf-8")
    bad = [f"{where}: :{role}:`{target}`" for owner, where, role, target in citations(source)
           if not resolves(target, module, owner)]
    assert not bad, f"{name} cites code that is not there: {bad}"


def test_the_check_finds_a_stale_name_and_takes_relative_ones(tmp_path, monkeypatch):
    source = '''
class Store:
    """Its :attr:`error`, :meth:`reload`, :class:`models.model.RegionModel`, :func:`models.model.gone`."""

    def __init__(self):
        self.error = None

    def reload(self):
        """Calls :meth:`missing`, :meth:`Store.reload` and :class:`RuntimeError`."""
'''
    (tmp_path / "lmve_cited_probe.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("lmve_cited_probe")
    found = [(where, target) for owner, where, role, target in citations(source)
             if not resolves(target, module, owner)]
    assert found == [("Store", "models.model.gone"), ("reload", "missing")]
