"""The OpenAPI document is exact: schemathesis's CLI (every check, every phase), run as a new user would against a
real ``lmve-serve`` on a model repository, finds no schema error, no undocumented status or content type, no
server error, no request the schema forbids accepted, and rejects a schema-valid request only where the bundle
decides or JSON Schema cannot say (the descriptions state both), each named in :data:`THE_SERVICE_DECIDES`."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import stop
from tests.e2e.servers import KEY, free_port, start_server, wait_alive

#: what a schema-valid request may still be refused for (ST202), as the refusal words it: the bundle's feature
#: and target counts, whether it takes `centers` or floors, and the cross-field counts JSON Schema cannot state
THE_SERVICE_DECIDES = re.compile("|".join([
    r"but the bundle expects \d+", r"this bundle has its own centre", r"centers: .*requires?", r"floor",
    r"has \d+ rows? but", r"features has \d+ rows but", r"rows, but features has", r"data is ragged",
    r"data has \d+ values but shape", r"nested data is", r"is given twice", r"columns, but the bundle expects",
    r"has \d+ columns", r"method '.*' is not served", r"coverage .*attain", r"unknown method",
    r"needs the header Inference-Header-Content-Length"]))
#: state-changing operations (load, unload, reload, recalibrate): exercised without the key only (401)
MUTATING = r"^/(admin/|v2/repository/models/)"


#: schemathesis's own crashes while generating a case (CPython 3.11's "AST constructor recursion depth mismatch",
#: met under load): not a finding about the API, so they are printed, not failed
TOOL_CRASH = re.compile(r"recursion", re.I)


def _failures(report: Path) -> list[dict]:
    """Every failed check and error of a schemathesis NDJSON report, with the response that failed it (a schema
    error is a ``NonFatalError``)."""
    out = []
    for line in report.read_text().splitlines():
        event = json.loads(line)
        (kind, body), = event.items()
        if "Error" in kind:
            value = body.get("value") or {}
            if value.get("type") in ("SystemError", "RecursionError") and TOOL_CRASH.search(value.get("message", "")):
                print(f"schemathesis crashed on a case of {body.get('label')}: {value.get('message')}")
                continue
            out.append({"code": kind, "label": json.dumps(body)[:300], "response": None})
        if kind != "ScenarioFinished":
            continue
        recorder = body["recorder"]
        for case, checks in (recorder.get("checks") or {}).items():
            for check in checks:
                if check["status"] != "failure":
                    continue
                response = (recorder.get("interactions", {}).get(case) or {}).get("response") or {}
                content = response.get("content") or {}
                text = base64.b64decode(content["$base64"]).decode("utf-8", "replace") if "$base64" in content else ""
                out.append({"code": check["failure_info"]["failure"]["code"], "label": recorder["label"],
                            "status": response.get("status_code"), "response": text})
    return out


def _run(url: str, out: Path, *extra: str) -> list[dict]:
    st = Path(sys.executable).parent / "st"
    proc = subprocess.run([str(st), "run", url, "--checks", "all", "--max-examples", "40", "--workers", "2",
                           "--seed", "98", "--report", "ndjson", "--report-dir", str(out), "--no-color", *extra],
                          capture_output=True, text=True, timeout=600, cwd=out.parent)
    reports = sorted(out.glob("*.ndjson"))
    assert reports, f"schemathesis wrote no report:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    (out / "stdout.txt").write_text(proc.stdout)
    return _failures(reports[-1])


@pytest.mark.slow
def test_schemathesis_finds_the_document_exact(site_repository, tmp_path):
    src, _ = site_repository
    shutil.copytree(src, tmp_path / "repo")
    port = free_port()
    proc = start_server(None, port, tmp_path / "server.log", LMVE_MODEL_REPOSITORY=str(tmp_path / "repo"),
                        LMVE_DEFAULT_MODEL="site=1")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc, 90.0, path="/readyz")
        url = f"{base}/openapi.json"
        found = _run(url, tmp_path / "keyed", "-H", f"X-API-Key: {KEY}", "--exclude-path-regex", MUTATING)
        # without the key: every guarded operation a documented 401. The key is checked before the route and its
        # methods, so an undeclared method gets the 401 too (a client without the key learns nothing of the
        # routes): the 405 check runs in the keyed run above
        found += _run(url, tmp_path / "no-key", "--exclude-checks", "unsupported_method")
    finally:
        stop(proc)
    decided = [f for f in found if f["code"] == "ST202" and THE_SERVICE_DECIDES.search(f["response"] or "")]
    wrong = [f for f in found if f not in decided]
    assert not wrong, "\n".join(f"{f['code']} {f['label']} [{f.get('status')}] {(f['response'] or '')[:300]}"
                                for f in wrong)
