"""The reference page's objects state their contract in numpydoc sections, read by griffe as the page reads them.

What the page renders is what ``models`` exports at its top level and every ``:::`` entry of
``docs/reference/python.md``: a module's public functions and classes, or the object named (an entry with
``members: false`` shows its summary alone). For each function and public method (inherited ones included):
a docstring; a ``Parameters`` section naming exactly the signature's parameters (a class: its ``__init__``'s;
a dataclass's field may be listed as an attribute or carry its own docstring); ``Returns`` where a value comes
back; ``Raises`` where the body raises. The loader is the page's: an override without a docstring shows the one
of the method it overrides (``docs/griffe_inherited.py``).
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import griffe
import pytest

import models

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "python.md"
ENTRY = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)


def entries(text: str) -> list[tuple[str, bool]]:
    """``(dotted name, members shown)`` for every ``:::`` entry of a page."""
    return [(m.group(1), "members: false" not in m.group(2)) for m in ENTRY.finditer(text + "\n")]


ENTRIES = entries(PAGE.read_text())
PUBLIC = tuple(dict.fromkeys([*(f"models.{name}" for name in models.__all__),
                              *(name for name, members in ENTRIES if members)]))
SUMMARIES = tuple(name for name, members in ENTRIES if not members)
OWN = ("models.", "training.", "service.")


@pytest.fixture(scope="module")
def loader() -> griffe.GriffeLoader:
    inherit = griffe.load_extensions(f"{ROOT / 'docs' / 'griffe_inherited.py'}:InheritDocstrings")
    found = griffe.GriffeLoader(search_paths=[str(ROOT)], docstring_parser=griffe.Parser.numpy, extensions=inherit)
    for package in ("models", "training", "service"):
        found.load(package)
    found.resolve_aliases(implicit=True, external=False)
    return found


def sections(obj) -> dict[str, list[str]]:
    """The docstring's numpydoc sections, each with the names it lists (empty for prose sections)."""
    found: dict[str, list[str]] = {}
    for section in obj.docstring.parse(griffe.Parser.numpy) if obj.docstring else []:
        items = section.value if isinstance(section.value, list) else []
        names = [part.strip().lstrip("*") for item in items for part in (getattr(item, "name", "") or "").split(",")]
        found.setdefault(section.kind.value, []).extend(n for n in names if n)
    return found


def body_of(function) -> ast.AST:
    return ast.parse(textwrap.dedent(function.source))


def gives_a_value(function) -> bool:
    for node in ast.walk(body_of(function)):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
    return False


def raises(function) -> bool:
    """Whether the body raises on purpose (an abstract method's ``NotImplementedError`` is not a contract)."""
    return any(isinstance(node, ast.Raise) and node.exc is not None
               and "NotImplementedError" not in ast.unparse(node.exc) for node in ast.walk(body_of(function)))


def parameters(function) -> list[str]:
    return [p.name.lstrip("*") for p in function.parameters if p.name not in ("self", "cls")]


def function_faults(function, where: str) -> list[str]:
    if not function.docstring:
        return [f"{where}: no docstring"]
    found, faults = sections(function), []
    wanted = parameters(function)
    if wanted and sorted(found.get("parameters", [])) != sorted(wanted):
        faults.append(f"{where}: Parameters {found.get('parameters', [])}, the signature has {wanted}")
    if gives_a_value(function) and not ({"returns", "yields"} & found.keys()):
        faults.append(f"{where}: returns a value, no Returns section")
    if raises(function) and "raises" not in found:
        faults.append(f"{where}: raises, no Raises section")
    return faults


def class_faults(cls, where: str) -> list[str]:
    faults = [] if cls.docstring else [f"{where}: no docstring"]
    init = cls.members.get("__init__")  # its own, or a dataclass's: an inherited one is its base's to document
    if init is not None and init.is_function and cls.docstring:
        wanted = parameters(init)
        found = sections(cls)
        listed = found.get("parameters", [])
        if "dataclass" in cls.labels:  # a field is a parameter and an attribute: listed, or its own docstring
            listed = [*listed, *found.get("attributes", []),
                      *(name for name, member in cls.all_members.items()
                        if not member.is_alias and member.is_attribute and member.docstring)]
            listed = [name for name in dict.fromkeys(listed) if name in wanted]
        if wanted and sorted(listed) != sorted(wanted):
            faults.append(f"{where}: Parameters {listed}, __init__ has {wanted}")
    for name, member in sorted(cls.all_members.items()):
        member = member.final_target if member.is_alias else member
        if name.startswith("_") or not member.path.startswith(OWN):
            continue
        if member.is_function and "property" not in member.labels:
            faults += function_faults(member, f"{where}.{name}")
        elif member.is_attribute and "property" in member.labels and not member.docstring:
            faults.append(f"{where}.{name}: property without a docstring")
    return faults


def lookup(loader, dotted: str):
    package, _, rest = dotted.partition(".")
    obj = loader.modules_collection[package][rest] if rest else loader.modules_collection[package]
    return obj.final_target if obj.is_alias else obj


def faults_of(loader, dotted: str) -> list[str]:
    """What ``dotted`` (a module: each public function and class it defines) fails of the contract."""
    obj = lookup(loader, dotted)
    if obj.is_module:
        faults = [] if obj.docstring else [f"{dotted}: no module docstring"]
        for name, member in obj.members.items():
            if not name.startswith("_") and not member.is_alias and (member.is_class or member.is_function):
                faults += faults_of(loader, f"{dotted}.{name}")
        return faults
    return class_faults(obj, dotted) if obj.is_class else function_faults(obj, dotted)


@pytest.mark.parametrize("dotted", PUBLIC)
def test_public_api_states_parameters_returns_and_raises(loader, dotted):
    faults = faults_of(loader, dotted)
    assert not faults, "\n".join(faults)


@pytest.mark.parametrize("dotted", SUMMARIES)
def test_modules_shown_by_summary_have_one(loader, dotted):
    assert lookup(loader, dotted).docstring, f"{dotted}: no module docstring"


def test_the_page_reader_tells_full_entries_from_summaries():
    text = "::: models.geometry\n\n::: service.shift\n    options:\n      members: false\n::: a.b"
    assert entries(text) == [("models.geometry", True), ("service.shift", False), ("a.b", True)]
    assert "models.RegionModel" in PUBLIC and "service.shift" in SUMMARIES


def test_the_check_catches_each_kind(tmp_path):
    (tmp_path / "sample.py").write_text(textwrap.dedent('''
        def undocumented(x):
            return x

        def good(x, y=1):
            """Add.

            Parameters
            ----------
            x : int
                A number.
            y : int
                Another.

            Returns
            -------
            int
                Their sum.

            Raises
            ------
            ValueError
                When x is negative.
            """
            if x < 0:
                raise ValueError(x)
            return x + y

        def wrong_names(x):
            """Echo.

            Parameters
            ----------
            z : int
                Not the parameter.
            """

        def no_returns():
            """Give one."""
            return 1

        def no_raises():
            """Fail."""
            raise ValueError("no")
    '''))
    sample = griffe.load("sample", search_paths=[str(tmp_path)], docstring_parser=griffe.Parser.numpy)
    faults = {name: function_faults(sample[name], name) for name in
              ("undocumented", "good", "wrong_names", "no_returns", "no_raises")}
    assert faults["good"] == []
    assert faults["undocumented"] == ["undocumented: no docstring"]
    assert faults["wrong_names"] == ["wrong_names: Parameters ['z'], the signature has ['x']"]
    assert faults["no_returns"] == ["no_returns: returns a value, no Returns section"]
    assert faults["no_raises"] == ["no_raises: raises, no Raises section"]
