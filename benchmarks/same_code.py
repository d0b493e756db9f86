"""Whether a change to ``models/``, ``service/`` and ``training/`` touched only their documentation.

Each module that differs from ``--against REV`` is parsed with and without its documentation (every bare
string statement removed: module, class, function and attribute docstrings; comments never reach the syntax
tree) and the two syntax trees compared. Modules whose trees are equal run the same code as at ``REV``, so no
speed or answer of theirs can have moved; the others are listed as changed, with the functions and classes
whose code differs, for the serving and training benchmarks to measure.

``python -m benchmarks.same_code --against REV`` writes ``benchmarks/results/same_code.md`` (exit status 1 when a
module's code changed).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, command, commit, write_text

OUT = RESULTS / "same_code.md"
PACKAGES = ("models", "service", "training")


def without_docs(source: str) -> ast.Module:
    """``source``'s syntax tree with every bare string statement taken out (an emptied body keeps a ``pass``)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                and isinstance(s.value.value, str))]
                setattr(node, name, kept or [ast.Pass()])
    return tree


def definitions(tree: ast.Module) -> dict[str, str]:
    """``"Class.method" -> dump`` for every function and class of ``tree`` (nested ones by dotted name)."""
    out: dict[str, str] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[prefix + child.name] = ast.dump(child)
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return out


def changed_modules(rev: str) -> list[str]:
    """The Python modules of the packages that differ between ``rev`` and the working tree."""
    out = subprocess.run(["git", "diff", "--name-only", rev, "--", *PACKAGES], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return sorted(p for p in out.split() if p.endswith(".py"))


def compare(path: str, rev: str) -> tuple[str, list[str]]:
    """``(verdict, what)`` for one module: "documentation only", "added", "removed" or "code changed" with the
    definitions whose code differs (added or removed ones included)."""
    old = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True)
    here = ROOT / path
    if old.returncode != 0:
        return "added", []
    if not here.exists():
        return "removed", []
    before, after = without_docs(old.stdout), without_docs(here.read_text())
    if ast.dump(before) == ast.dump(after):
        return "documentation only", []
    a, b = definitions(before), definitions(after)
    return "code changed", sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))


def report(rows: list[tuple[str, str, list[str]]], rev: str) -> str:
    same = sum(verdict == "documentation only" for _, verdict, _ in rows)
    lines = [f"# Code unchanged but for documentation, against {rev}", "",
             f"Command: `{command('same_code')}` at {commit()}.", "",
             f"{len(rows)} modules of {', '.join(PACKAGES)} differ from {rev}; in {same} of them only the "
             "documentation differs (the syntax trees without docstrings are equal).", "",
             "| module | verdict | definitions whose code differs |", "| --- | --- | --- |"]
    lines += [f"| `{path}` | {verdict} | {', '.join(f'`{n}`' for n in what) or '-'} |" for path, verdict, what in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.same_code", description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="the commit to compare with (default: HEAD)")
    parser.add_argument("--out", default=str(OUT), help="where the table goes (default: %(default)s)")
    args = parser.parse_args(argv)
    rows = [(path, *compare(path, args.against)) for path in changed_modules(args.against)]
    text = report(rows, args.against)
    write_text(Path(args.out), text)
    print(text, end="")
    return int(any(verdict != "documentation only" for _, verdict, _ in rows))


if __name__ == "__main__":
    sys.exit(main())
