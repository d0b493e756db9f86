"""``training/`` reads as its stages: ``train()`` short, no function longer than a screen and a half (argument
parsers aside), and no benchmark code in the package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "training"


def function_lengths() -> dict[str, int]:
    """``"training/pipeline.py:train" -> lines`` for every function and method of ``training/``."""
    out = {}
    for path in sorted(TRAINING.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_train_is_a_short_list_of_stages():
    assert function_lengths()["training/pipeline.py:train"] < 40


def test_no_training_function_is_over_80_lines():
    long = {name: n for name, n in function_lengths().items() if n > 80 and not name.endswith(":build_parser")}
    assert not long, f"functions over 80 lines: {long}"


def test_training_holds_no_benchmark_module():
    assert not [p.name for p in TRAINING.glob("*.py") if p.stem in ("bench", "peer", "shift")]
    assert not [p for p in TRAINING.rglob("*.py") if "import benchmarks" in p.read_text()
                or "from benchmarks" in p.read_text()]
