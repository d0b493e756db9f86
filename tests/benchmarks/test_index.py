"""``benchmarks/README.md`` is the index of ``benchmarks/results/``: every results file is named in a
``results`` column, every name there exists, and every benchmark script is listed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def expand(name: str) -> list[str]:
    """``table1.{csv,md}`` -> ``table1.csv``, ``table1.md`` (one brace group, as the index writes them)."""
    m = re.fullmatch(r"(.*)\{([^{}]+)\}(.*)", name)
    return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")] if m else [name]


def table_column(markdown: str, column: str) -> list[str]:
    """The cells of every markdown table's column named ``column``."""
    cells, index = [], None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            index = None
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if index is None:
            index = row.index(column) if column in row else -1
        elif index >= 0 and not set(line) <= set("|-: ") and index < len(row):
            cells.append(row[index])
    return cells


def indexed_results(markdown: str) -> set[str]:
    names = set()
    for cell in table_column(markdown, "results"):
        for token in re.findall(r"`([^`]+)`", cell):
            names.update(expand(token))
    return names


def test_the_index_and_the_results_folder_agree():
    on_disk = {p.relative_to(BENCH / "results").as_posix() for p in (BENCH / "results").rglob("*") if p.is_file()}
    indexed = indexed_results((BENCH / "README.md").read_text())
    assert not on_disk - indexed, f"results not in benchmarks/README.md: {sorted(on_disk - indexed)}"
    assert not indexed - on_disk, f"benchmarks/README.md names missing results: {sorted(indexed - on_disk)}"


def benchmark_modules() -> dict[str, bool]:
    """Every module of the ``benchmarks`` package (dotted name -> whether it runs as a command), caches aside."""
    modules = {}
    for path in BENCH.rglob("*.py"):
        rel = path.relative_to(BENCH)
        if "cache" in rel.parts or path.name == "__init__.py":
            continue
        name = ".".join(("benchmarks", *rel.with_suffix("").parts))
        modules[name] = 'if __name__ == "__main__"' in path.read_text()
    return modules


def test_every_benchmark_is_listed_with_its_command():
    """A command is listed as ``python -m benchmarks.<name>``; a shared module by its name."""
    text = (BENCH / "README.md").read_text()
    modules = benchmark_modules()
    assert "benchmarks.bench" in modules and modules["benchmarks.bench"]
    missing = {name for name, runs in modules.items()
               if not re.search(("python -m " if runs else "`") + re.escape(name) + r"[` ]", text)}
    assert not missing, f"benchmarks not listed in benchmarks/README.md: {sorted(missing)}"


def test_the_index_parser_expands_braces_and_reads_only_results_columns():
    md = "| table | results |\n|---|---|\n| a | `x.{csv,md}`, `y.json` |\n\ntext `z.md`\n"
    assert indexed_results(md) == {"x.csv", "x.md", "y.json"}


def test_the_top_of_results_holds_one_current_table_per_benchmark():
    """A variant run (a paper variant, a --before baseline, an A/B) lives under results/variants/."""
    import re

    variant_like = re.compile(r"(table1|runs|volumes)_.+|train_speed_[0-9a-f]{7}|.+_(ab|ab_\d+|h\d+)")
    top = [p.stem for p in (BENCH / "results").iterdir() if p.is_file()]
    assert not [s for s in top if variant_like.fullmatch(s)], "variant runs belong in benchmarks/results/variants/"
