"""The benchmarks are a package outside the product: run as ``python -m benchmarks.<name>`` with no path edits,
and absent from the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.benchmarks.test_index import benchmark_modules

ROOT = Path(__file__).resolve().parents[2]


def tracked(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines()]


def test_no_benchmark_edits_the_import_path():
    edits = [p.relative_to(ROOT).as_posix() for p in tracked("benchmarks/*.py") if "sys.path" in p.read_text()]
    assert not edits, f"benchmarks that edit sys.path: {edits}"


@pytest.mark.slow
def test_every_benchmark_module_imports_from_the_repository_root():
    """Each module imports its siblings through the package: one interpreter, the root as its working folder."""
    names = sorted(benchmark_modules())
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint(len(sys.argv) - 1)"
    out = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(names))]


@pytest.mark.slow
def test_the_paper_benchmark_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m benchmarks.bench")
    assert "--variant" in out.stdout and "--protocol" in out.stdout


def test_the_wheel_holds_the_product_and_no_benchmark(tmp_path):
    """``pip wheel`` on a copy of the tracked tree (benchmarks included: the package list leaves them out), so
    that the build's own ``build/`` and ``*.egg-info`` stay out of the checkout."""
    source = tmp_path / "source"
    for path in tracked("."):
        if path.is_file():
            target = source / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    assert (source / "benchmarks" / "bench.py").is_file()
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                            "-v", "-w", str(tmp_path)], check=True, capture_output=True, text=True, timeout=300)
    # setuptools' own warnings show under -v: the license as a TOML table printed three deprecations
    assert "deprecat" not in (build.stdout + build.stderr).lower(), build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = tmp_path.glob("lmve-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        sources = {n: archive.read(n) for n in names if n.endswith(".py")}
    assert "License-Expression: MIT" in metadata.splitlines()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == \
        {"models", "service", "training"}
    for module in ("training/bench.py", "training/peer.py", "training/shift.py"):
        assert module not in names
    assert sources and not [n for n, text in sources.items()
                            if b"import benchmarks" in text or b"from benchmarks" in text]
    # every product module is in it
    product = {p.relative_to(ROOT).as_posix() for p in tracked("*.py") if p.relative_to(ROOT).parts[0] in
               ("models", "service", "training")}
    assert product <= set(names)
