"""The quick subset, ``bash scripts/test.sh --quick`` (pytest ``-m "not slow"``), holds tests of every test
package; what it costs beside the full suite is in benchmarks/results/suite_costs.md."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_the_quick_subset_runs_tests_of_every_package(request):
    option = request.config.option
    if [Path(a).resolve() for a in request.config.args] != [TESTS] or option.keyword or option.markexpr not in (
            "", "not slow"):
        pytest.skip("this run was not of the whole suite (or its quick subset)")
    packages = {p.name for p in TESTS.iterdir() if (p / "__init__.py").is_file()}
    assert {"models", "training", "service"} <= packages
    quick = {Path(item.path).relative_to(TESTS).parts[0] for item in request.session.items
             if item.get_closest_marker("slow") is None}
    assert packages <= quick, f"no quick test in: {sorted(packages - quick)}"
