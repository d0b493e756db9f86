"""The documentation site: ``mkdocs build --strict`` passes, every page is in the navigation, the README
stays short, and the generated reference names every flag of every ``lmve-*`` command and every
``LMVE_*`` variable the code reads."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytest.importorskip("mkdocs", reason="the docs extra is not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                           "PATH": str(BIN)})
    assert run.returncode == 0, run.stderr[-4000:]
    return out


def page_text(site: Path, page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text()))


def nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_readme_is_at_most_200_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_every_page_is_in_the_navigation_and_every_entry_exists():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    in_nav = set(nav_pages(config["nav"]))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert in_nav == on_disk, (sorted(on_disk - in_nav), sorted(in_nav - on_disk))


@pytest.mark.slow
def test_the_site_builds_strict_with_the_generated_openapi(site):
    from service.app import create_app
    from service.settings import ServiceSettings

    served = json.loads((site / "reference" / "openapi.json").read_text())
    assert set(served["paths"]) == set(create_app(ServiceSettings()).openapi()["paths"])
    text = page_text(site, "reference/http-api")
    assert all(path in text for path in served["paths"])


def commands() -> list[str]:
    import tomllib

    return sorted(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


@pytest.mark.slow
@pytest.mark.parametrize("command", commands())
def test_every_flag_of_every_command_is_in_the_cli_reference(site, command):
    help_text = subprocess.run([str(BIN / command), "--help"], capture_output=True, text=True, timeout=120,
                               check=True).stdout
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))
    assert "--help" in flags
    text = page_text(site, "reference/cli")
    assert command in text
    missing = sorted(f for f in flags if f not in text)
    assert not missing, f"{command}: flags not in the CLI reference: {missing}"


def variables_the_code_reads() -> set[str]:
    from service.settings import ServiceSettings
    from training.data.location import TrainingSettings

    names = {f"LMVE_{field}".upper() for cls in (ServiceSettings, TrainingSettings) for field in cls.model_fields}
    for folder in ("models", "service", "training", "scripts", "benchmarks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and "cache" not in path.relative_to(ROOT).parts:
                names |= set(re.findall(r"\bLMVE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def test_every_variable_the_code_reads_is_in_the_configuration_reference(site):
    names = variables_the_code_reads()
    assert {"LMVE_BUNDLE", "LMVE_DATA_DIR", "LMVE_BENCH_THREADS", "LMVE_TORCH_THREADS"} <= names
    text = page_text(site, "reference/configuration")
    missing = sorted(n for n in names if n not in text)
    assert not missing, f"LMVE_* variables not in the configuration reference: {missing}"


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into the docs"
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
