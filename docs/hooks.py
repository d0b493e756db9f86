"""MkDocs hooks: the reference pages generated from the code when the site is built.

A page that holds a marker line gets it replaced by what the code says today:

* ``<!-- lmve:cli -->``: ``--help`` of every command in ``pyproject.toml``'s ``[project.scripts]``
  (each module's ``build_parser()``);
* ``<!-- lmve:configuration -->``: every ``LMVE_*`` variable, from the pydantic-settings classes and
  :data:`OTHER_VARIABLES`;
* ``<!-- lmve:http-api -->``: the routes and schemas of the OpenAPI document that ``create_app``
  serves at ``/openapi.json``, which the build also writes as ``reference/openapi.json``.

The same functions are what ``tests/docs/test_site.py`` checks against the code. Sphinx roles in docstrings
(``:class:`~models.model.RegionModel```) become code, linked when they name a documented object.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (the docs extra installs tomli there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

#: variables read with ``os.environ`` rather than through a settings class
OTHER_VARIABLES = {
    "LMVE_BENCH_THREADS": ("int", "1", "python -m benchmarks.bench: torch threads per split process"),
    "LMVE_TEST_RUN": ("str", "set by scripts/test.sh", "a token every process of a test run inherits: what still "
                      "carries it after pytest is stopped (tests/processes.py)"),
    "LMVE_TEST_GROUPS": ("path", "set by scripts/test.sh", "the file in which the tests record the process groups "
                         "of the servers they start, for the same sweep"),
    "LMVE_SUITE_COSTS_OUT": ("path", "set by python -m benchmarks.suite_costs", "where its pytest plugin writes the "
                             "measured run's times, test by test"),
}

#: settings classes, each with the page section it fills
SETTINGS = (("service.settings:ServiceSettings", "lmve-serve (and every worker)"),
            ("training.data.location:TrainingSettings", "lmve-train (and the benchmarks)"))


@contextlib.contextmanager
def _clean_environment():
    """Defaults as a fresh machine has them: the builder's own ``LMVE_*`` and ``COLUMNS`` left out."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("LMVE_") or k == "COLUMNS"}
    for k in saved:
        del os.environ[k]
    os.environ["COLUMNS"] = "100"
    try:
        yield
    finally:
        del os.environ["COLUMNS"]
        os.environ.update(saved)


def commands() -> dict[str, str]:
    """``[project.scripts]``: command name -> ``module:function``."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def cli_markdown() -> str:
    out = []
    with _clean_environment():
        for name, target in sorted(commands().items()):
            module = importlib.import_module(target.split(":")[0])
            help_text = module.build_parser().format_help().rstrip()
            out += [f"## {name}", "", f"`{target}`", "", "```text", help_text, "```", ""]
    return "\n".join(out)


def _type_name(annotation) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"\b(typing|pathlib|pydantic\.types)\.", "", text)
    return text.replace("NoneType", "None")


def settings_variables() -> list[tuple[str, str, str, str, str]]:
    """(variable, type, default, description, read by) for every variable a settings class reads."""
    from pydantic_core import PydanticUndefined

    rows = []
    for target, reader in SETTINGS:
        module, cls_name = target.split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        prefix = cls.model_config.get("env_prefix", "")
        for name, field in cls.model_fields.items():
            names = [f"{prefix}{name}".upper()]
            alias = field.validation_alias
            for choice in getattr(alias, "choices", ()):
                if isinstance(choice, str) and choice.startswith(prefix) and choice.upper() not in names:
                    names.append(choice.upper())
            if field.default_factory is not None:
                doc = (field.default_factory.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
                default = "[]" if field.default_factory.__name__ == "list" else f"computed: {doc}" if doc else "computed"
            elif field.default is PydanticUndefined or field.default is None:
                default = "unset"
            else:
                default = repr(field.default) if isinstance(field.default, str) else str(field.default)
            description = (field.description or "").replace("\n", " ")
            if len(names) > 1:
                description += f" ({', '.join(names[1:])}: its former name, still read)"
            rows.append((names[0], _type_name(field.annotation), default, description, reader))
    for var, (kind, default, description) in OTHER_VARIABLES.items():
        rows.append((var, kind, default, description, "read directly"))
    return rows


def configuration_markdown() -> str:
    lines = ["| variable | type | default | what | read by |", "|---|---|---|---|---|"]
    for var, kind, default, description, reader in settings_variables():
        cell = description.replace("|", "\\|")
        # a value in code type; words (a computed default, who sets it) as words, their ``literals`` as code
        shown = default.replace("``", "`") if default.startswith(("computed:", "set by")) else f"`{default}`"
        lines.append(f"| `{var}` | `{kind}` | {shown} | {cell} | {reader} |")
    return "\n".join(lines) + "\n"


def openapi() -> dict:
    with _clean_environment():
        from service.app import create_app
        from service.settings import ServiceSettings

        return create_app(ServiceSettings()).openapi()


def _schema_type(schema: dict) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    return schema.get("type", "any")


def http_api_markdown(doc: dict | None = None) -> str:
    doc = doc or openapi()
    out = ["## Routes", "", "| method | path | summary |", "|---|---|---|"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            out.append(f"| `{method.upper()}` | `{path}` | {op.get('summary', '')} |")
    out.append("")
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            out += [f"### {method.upper()} {path}", ""]
            if op.get("description"):
                out += [op["description"].strip(), ""]
            body = op.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out.append(f"Request body (`{media}`): {_schema_type(content.get('schema', {}))}")
                out.append("")
            codes = ", ".join(f"`{code}` {r.get('description', '')}" for code, r in op.get("responses", {}).items())
            out += [f"Responses: {codes}", ""]
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [schema["description"].strip(), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", ()))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, spec in props.items():
                desc = (spec.get("description") or "").replace("\n", " ").replace("|", "\\|")
                out.append(f"| `{field}` | {_schema_type(spec)} | {'yes' if field in required else ''} | {desc} |")
            out.append("")
    return "\n".join(out)


GENERATORS = {"cli": cli_markdown, "configuration": configuration_markdown, "http-api": http_api_markdown}
MARKER = re.compile(r"^<!-- lmve:([a-z-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


#: a Sphinx role as the docstrings write it (``:class:`~models.model.RegionModel```), once rendered to HTML
ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):<code>(~?)([\w.]+)(\(\))?</code>")
#: the packages the reference documents: a role naming their objects becomes a link
DOCUMENTED = ("models.", "service.", "training.")


def role_html(match: re.Match) -> str:
    """A rendered role as code: a link (through autorefs, silent when the object has no page) when it names a
    documented object in full, the last part of the name alone after ``~``."""
    tilde, name, call = match.groups()
    title = f"<code>{(name.rsplit('.', 1)[-1] if tilde else name)}{call or ''}</code>"
    if name.startswith(DOCUMENTED):
        return f'<autoref identifier="{name}" optional>{title}</autoref>'
    return title


def on_page_content(html: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    return ROLE.sub(role_html, html)


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, "reference/openapi.json", content=json.dumps(openapi(), indent=2)))
    return files


__all__ = ["GENERATORS", "on_files", "on_page_content", "on_page_markdown"]
