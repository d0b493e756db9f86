"""The house rules of the three packages (``models/``, ``service/``, ``training/``), checked on the tree.

Docstrings state contracts: none over :data:`MAX_DOC_WORDS` words, and no docstring or comment quotes a
measured timing, an issue number or a file outside the repository (the evidence lives in the docs'
benchmark pages). ``train()`` reads as its stages, no function is longer than a screen and a half
(argument parsers aside), and ``training/`` holds no benchmark code."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("models", "service", "training")
TRAINING = ROOT / "training"
MAX_DOC_WORDS = 300
MAX_FUNCTION_LINES = 80
MAX_TRAINING_MODULE_LINES = 400
#: training's rooms, each a sub-package (lint-imports' contract "training-layers" keeps their order)
TRAINING_ROOMS = {"commands", "pipeline", "calibration", "data", "figures"}
#: what a docstring or a comment may not say
FORBIDDEN = {"a reference to the spec": re.compile(r"\bSPEC\b"),
             "an issue number": re.compile(r"\bissues? ?#?\d+", re.IGNORECASE),
             "a measured timing": re.compile(r"\d[\d.,]*\s?(?:us|µs|ms)\b")}


def sources(packages=PACKAGES) -> list[Path]:
    """Every hand-written module of ``packages`` (generated protobuf modules aside)."""
    return [p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py")) if not p.name.endswith("_pb2.py")]


def texts(path: Path):
    """``(where, text)`` for every docstring and comment of ``path``."""
    src, name = path.read_text(), path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield f"{name}:{getattr(node, 'lineno', 1)} {getattr(node, 'name', '')}", doc
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield f"{name}:{tok.start[0]}", tok.string


def findings(paths) -> list[str]:
    out = []
    for path in paths:
        for where, text in texts(path):
            if len(text.split()) > MAX_DOC_WORDS:
                out.append(f"{where}: a docstring of {len(text.split())} words")
            for what, pattern in FORBIDDEN.items():
                for m in pattern.finditer(text):
                    out.append(f"{where}: {what}: ...{text[max(0, m.start() - 30):m.end() + 10]!r}")
    return out


def function_lengths(paths) -> dict[str, int]:
    """``"training/pipeline/stages.py:train" -> lines`` for every function and method of ``paths``, its
    docstring not counted (a contract's sections do not make the code longer to read)."""
    out = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = node.body[0] if ast.get_docstring(node) is not None else None
                doc_lines = doc.end_lineno - doc.lineno + 1 if doc is not None else 0
                out[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = node.end_lineno - node.lineno + 1 - doc_lines
    return out


def test_docstrings_and_comments_state_contracts_not_evidence():
    found = findings(sources())
    assert not found, "\n".join(found)


def test_the_check_catches_each_kind(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""' + "word " * (MAX_DOC_WORDS + 1) + '"""\n\n\ndef f():\n    """As SPEC section 9 says."""\n'
                   "    return 1  # took 3.5 ms here (issue 42)\n")
    found = "\n".join(findings([bad]))
    for what in ("words", "a reference to the spec", "an issue number", "a measured timing"):
        assert what in found


def test_train_is_a_short_list_of_stages():
    assert function_lengths(sources(["training"]))["training/pipeline/stages.py:train"] < 40


def test_no_function_is_over_80_lines():
    long = {name: n for name, n in function_lengths(sources()).items()
            if n >= MAX_FUNCTION_LINES and not name.endswith(":build_parser")}
    assert not long, f"functions of {MAX_FUNCTION_LINES} lines or more: {long}"


def test_training_is_in_rooms_of_short_modules():
    flat = sorted(p.name for p in TRAINING.glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules outside training's sub-packages: {flat}"
    rooms = {p.parent.name for p in TRAINING.glob("*/__init__.py")}
    assert rooms == TRAINING_ROOMS, f"training's sub-packages are {sorted(rooms)}"
    long = {p.relative_to(ROOT).as_posix(): n for p in sources(["training"])
            if (n := len(p.read_text().splitlines())) > MAX_TRAINING_MODULE_LINES}
    assert not long, f"training modules over {MAX_TRAINING_MODULE_LINES} lines: {long}"


def test_no_two_modules_share_a_name_across_rooms():
    """A reader never tells two modules apart by their path alone, unless the package's role makes it obvious:
    a package's ``base.py``, each package's ``exceptions.py``, a router named after the resource it serves."""
    by_name: dict[str, list[str]] = {}
    for p in sources():
        if p.name not in ("__init__.py", "__main__.py", "base.py", "exceptions.py") and p.parent.name != "routers":
            by_name.setdefault(p.name, []).append(p.relative_to(ROOT).as_posix())
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"modules of one name in several places: {shared}"


def test_training_holds_no_benchmark_module():
    assert not [p.name for p in TRAINING.glob("*.py") if p.stem in ("bench", "peer", "shift")]
    assert not [p for p in TRAINING.rglob("*.py") if "import benchmarks" in p.read_text()
                or "from benchmarks" in p.read_text()]


@pytest.mark.parametrize("text", ["took 12 ms", "about 150 us", "7.2 ms against", "3 µs"])
def test_a_timing_is_recognised(text):
    assert FORBIDDEN["a measured timing"].search(text)


def test_every_protocol_adapter_is_in_the_independent_routers_contract():
    """import-linter's ``routers-independent`` contract lists every module of ``service/routers`` and the gRPC
    endpoint: a new router missing from it would be free to import another unnoticed."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    listed = set(next(c for c in contracts if c["id"] == "routers-independent")["modules"])
    routers = {f"service.routers.{p.stem}" for p in (ROOT / "service" / "routers").glob("*.py") if p.stem != "__init__"}
    assert listed == routers | {"service.grpc_endpoint"}, (routers | {"service.grpc_endpoint"}) ^ listed
