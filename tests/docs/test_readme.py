"""The README's examples are what one gets: its request bodies, sent to the default bundle trained as
``scripts/serve.sh`` trains it, answer the numbers its comments print, and its walk commands exit as their
comments say.

Run-to-run spread: training the default twice gives the same bundle, file for file (same seed, deterministic
CPU kernels); on other machines float reductions may differ in the last bits. Each printed number is compared
to one unit in its last printed digit (``21.34``: within 0.01), which that spread never reaches.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def section(title: str) -> str:
    """The first ```bash block under the README heading ``title``, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    body = text[text.index(f"## {title}"):]
    block = body[body.index("```bash") + len("```bash"):]
    return block[:block.index("```")].replace("\\\n", " ")


def serve_sh_training() -> list[str]:
    """The arguments ``scripts/serve.sh`` trains the default bundle with (its ``--out`` left to the caller)."""
    line = next(ln for ln in (ROOT / "scripts" / "serve.sh").read_text().splitlines() if "lmve-train" in ln)
    args = shlex.split(line.split("lmve-train", 1)[1])
    return args[:args.index("--out")]


@pytest.fixture(scope="module")
def default_bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("readme") / "synthetic"
    subprocess.run([str(BIN / "lmve-train"), *serve_sh_training(), "--out", str(out), "--quiet"], check=True,
                   cwd=ROOT)
    return out / "bundle"


def requests(block: str) -> list[tuple[str, dict, str]]:
    """``(route, body, printed answer)`` of each ``curl`` in ``block``: the JSON after ``-d`` and the comment
    lines that follow it, joined."""
    out = []
    for m in re.finditer(r"curl -s localhost:8000(/\S+).*?-d '(.*?)'\n((?:# [^\n]*\n?)+)", block, re.S):
        printed = "".join(line[2:] for line in m.group(3).splitlines())
        out.append((m.group(1), json.loads(m.group(2)), printed))
    return out


def printed_values(printed: str) -> list[tuple[str, str]]:
    """``(key, value text)`` of every ``"key":value`` the comment prints (a value: a bracketed list, a string,
    a number, true, false or null; ``..`` marks what it leaves out)."""
    pairs, i = [], 0
    for m in re.finditer(r'"(\w+)":', printed):
        if m.start() < i:
            continue
        j = m.end()
        if printed[j:j + 2] == "[{":
            continue  # a list of objects: its members are read one by one
        if printed[j] == "[":
            depth, k = 0, j
            while True:
                depth += {"[": 1, "]": -1}.get(printed[k], 0)
                k += 1
                if depth == 0:
                    break
        elif printed[j] == "{":
            continue
        else:
            k = j + re.match(r'"[^"]*"|[^,}\]]+', printed[j:]).end()
        pairs.append((m.group(1), printed[j:k]))
        i = k
    return pairs


def agrees(printed, actual, text: str) -> bool:
    """``printed`` (parsed from ``text``) matches ``actual`` to one unit in its last printed digit; a list
    printed shorter (``..``) is compared on what it prints."""
    if isinstance(printed, list):
        return isinstance(actual, list) and len(printed) <= len(actual) and all(
            agrees(p, a, t) for p, a, t in zip(printed, actual, _items(text)))
    if isinstance(printed, bool) or printed is None or isinstance(printed, str):
        return printed == actual
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(actual - printed) <= 10.0 ** -decimals + 1e-12


def _items(text: str) -> list[str]:
    """The texts of a printed list's items (one level deep)."""
    inner, depth, start, out = text.strip()[1:-1], 0, 0, []
    for k, ch in enumerate(inner + ","):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(inner[start:k].strip())
            start = k + 1
    return [t for t in out if t and t != ".."]


def _parse(text: str):
    cleaned = re.sub(r",?\s*\.\.", "", text)
    return json.loads(cleaned)


@pytest.mark.slow
def test_the_readme_requests_answer_what_it_prints(default_bundle):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import ServiceSettings

    calls = requests(section("One request"))
    assert [route for route, _, _ in calls] == ["/predict-region", "/contains"]
    with TestClient(create_app(ServiceSettings(bundle=default_bundle))) as client:
        for route, body, printed in calls:
            answer = client.post(route, json=body).json()
            first = (answer.get("regions") or answer.get("results"))[0]
            checked = 0
            for key, text in printed_values(printed):
                value = _parse(text)
                if ".." in text and value in ([], [[], []]):
                    continue  # "[[..],[..]]": printed as a placeholder
                actual = first[key] if key in first else answer[key]
                assert agrees(value, actual, text), f"README prints {key}: {text}; the default bundle answers {actual}"
                checked += 1
            assert checked >= 4


@pytest.mark.slow
def test_the_readme_walk_commands_exit_as_their_comments_say(default_bundle, tmp_path):
    """The README's walk block, run as written (its paths under a scratch folder, its bundle the default)."""
    lines = [ln.strip() for ln in section("Check it on a walk, score a log").splitlines() if ln.strip()]
    stated = 0
    for line in lines:
        command, _, comment = line.partition("#")
        argv = [a.replace("artifacts/synthetic/bundle", str(default_bundle)) for a in shlex.split(command)]
        argv = [str(ROOT / a) if a.startswith(("examples/", ".venv/")) else a for a in argv]
        code = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
        want = re.search(r"exit (\d)", comment)
        expected = int(want.group(1)) if want else 0
        stated += want is not None
        assert code.returncode == expected, f"{line}\nexited {code.returncode}, the README says {expected}\n{code.stderr[-2000:]}"
    assert stated >= 2 and (tmp_path / "runs" / "walk" / "regions.parquet").is_file()
