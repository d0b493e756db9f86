"""``docs/concepts/architecture.md`` lists every module of ``models/``, ``service/`` and ``training/``, and
names no module that is not there."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

from tests.docs.names import resolves
from training.data.datasets import DATASETS

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


# ------------------------------------------------------------------------------ every name the page cites
#: the top-level entries a path on the page may start with
TOPS = ("models", "service", "training", "tests", "benchmarks", "docs", "scripts")
#: the code the names are looked up in (ast, not imported: a name is found where it is defined)
CODE = ("models", "service", "training", "benchmarks", "tests", "docs")
#: names the page cites from outside the project, with where they come from (checked by import)
EXTERNAL = {"TestClient": "fastapi.testclient"}
#: numpydoc's section names, which the page cites as words
SECTIONS = {"Parameters", "Returns", "Raises"}
IDENT = r"[A-Za-z_]\w*"


def code_index() -> tuple[set[str], dict[str, set[str]], dict[str, list[str]]]:
    """Every name the project defines (classes, functions, module-level and class-level assignments, module
    stems), each class's members, and each class's bases by name."""
    import ast

    names, members, bases = set(), {}, {}
    for top in CODE:
        for path in (ROOT / top).rglob("*.py"):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            names.add(path.stem)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    own = members.setdefault(node.name, set())
                    bases.setdefault(node.name, []).extend(b.id for b in node.bases if isinstance(b, ast.Name))
                    for item in node.body:
                        own.update(_bound(item))
            for item in tree.body:
                names.update(_bound(item))
    return names, members, bases


def _bound(node) -> set[str]:
    """The names a statement binds: a def, a class, an assignment's targets."""
    import ast

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def source_text() -> str:
    """The project's code, as one text (a file name the code writes is a string in it)."""
    return "\n".join(p.read_text(encoding="utf-8") for top in PACKAGES for p in (ROOT / top).rglob("*.py"))


def has_member(cls: str, name: str, members: dict, bases: dict, seen=frozenset()) -> bool:
    """Whether the class ``cls`` (by name) or one of its bases defines ``name``."""
    if name in members.get(cls, ()):
        return True
    return any(has_member(b, name, members, bases, seen | {cls}) for b in bases.get(cls, ()) if b not in seen)


def cited(text: str) -> list[str]:
    """What the page writes in backticks."""
    return re.findall(r"`([^`\n]+)`", text)


def faults(tokens, names, members, bases) -> list[str]:
    """Each cited path, dotted name, ``Class.member``, call and code name that does not exist (a bare name is
    checked when it is a call, has an underscore or a capital: a built-in dataset's name counts)."""
    out = []
    for token in tokens:
        if token.startswith("LMVE_") or " " in token or "|" in token or "->" in token:
            continue  # environment variables, commands, diagrams
        if "/" in token:
            path = token.split("<")[0].rstrip("/").rsplit("/", 1)[0] if "<" in token else token.rstrip("/")
            if token.split("/")[0] in TOPS and not (ROOT / path).exists():
                out.append(f"path {token!r}")
            continue
        if re.fullmatch(r"[\w-]+(\.[\w-]+)*\.(py|md|toml|proto|sh|npz)", token) or token == ".npz":
            # a file name alone: in the repository, or written by the code (a string it holds)
            if not ((ROOT / token).exists() or any(next(ROOT.glob(f"{top}/**/{token}"), None) for top in CODE)
                       or token in source_text()):
                out.append(f"file {token!r}")
            continue
        call = re.fullmatch(rf"({IDENT}(?:\.{IDENT})*)\([\w, ]*\)", token)
        name = call.group(1) if call else token
        if not re.fullmatch(rf"{IDENT}(?:\.{IDENT})*", name):
            continue
        head, *rest = name.split(".")
        if head in TOPS or head in PACKAGES:
            if not resolves(name):
                out.append(f"dotted name {token!r}")
        elif rest and head[0].isupper():
            if len(rest) != 1 or not has_member(head, rest[0], members, bases):
                out.append(f"member {token!r}")
        elif head in EXTERNAL:
            if not resolves(f"{EXTERNAL[head]}.{head}"):
                out.append(f"external {token!r}")
        elif not rest and (call or "_" in head or head[0].isupper()) and head not in SECTIONS:
            if head not in names and head not in DATASETS and not hasattr(builtins, head):
                out.append(f"name {token!r}")
    return out


def test_every_path_and_name_the_page_cites_exists():
    names, members, bases = code_index()
    bad = faults(cited(PAGE.read_text()), names, members, bases)
    assert not bad, f"{PAGE.name} cites what the code does not have: {bad}"


def test_the_citation_check_finds_what_is_missing():
    names, members, bases = code_index()
    page = ("`models/geo.py` `tests/models/test_<nothing>.py` `models/nowhere.py` `models.model.RegionModel` "
            "`models.model.NoSuchThing` `DataPlane.run` `DataPlane.encode` `train()` `no_such_function()` "
            "`TrainConfig` `NoSuchClass` `TestClient` `Parameters` `lmve-train --centre` `LMVE_DATA_DIR` `report.md` "
            "`nothing.md`")
    assert faults(cited(page), names, members, bases) == [
        "path 'models/nowhere.py'", "dotted name 'models.model.NoSuchThing'", "member 'DataPlane.encode'",
        "name 'no_such_function()'", "name 'NoSuchClass'", "file 'nothing.md'"]
