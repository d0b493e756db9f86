"""Where a region request's time goes, stage by stage, in-process on one thread.

    python -m benchmarks.serving_stages [--bundles default,uji-knn] [--sizes 1,256,1024]

For each bundle of :mod:`benchmarks.serving` (trained once, cached there) and each batch size, the time of
every stage of ``POST /predict-region``, each timed alone on the bundle's own request rows:

- ``parse (pydantic)``: the body's JSON into the request model, as the service parses it; ``parse (orjson)``:
  the fastest JSON parser installed, for comparison; ``to array``: the parsed rows into a float64 matrix;
- ``features``: the model's input stage (the checks, the RSSI step, the scaling; ``to array`` included);
- ``centre``, ``shape (<method>)`` (the served method's one pass), ``typicality``: the model's stages;
- ``model``: ``RegionModel.predict_region`` whole (the stages above with the search shared by the centre and
  NLE, the fallback rule, the thresholds);
- ``answer rows`` (the response's geometry and rows) and ``answer JSON`` (orjson);
- ``request (service)`` and ``request (no-op)``: one whole request through the ASGI app in-process (no
  socket): ``lmve-serve``'s app, and :mod:`benchmarks.noop_app` on the same body.

Each figure is the best of ``--repeats`` timings of a loop (OMP and the search on one thread, as one uvicorn
worker's event loop runs a small request); ``per_row_us`` divides by the batch. Writes
``benchmarks/results/serving_stages.{json,md}`` with the command and commit, and each size's budget at the
serving targets of issue 74 (1,024 rows at 40,000 rows/s: 25.6 ms a request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import RESULTS, command, commit, machine, utc_now, write_json, write_text  # noqa: E402

from benchmarks.serving import ISSUE_74, bundle  # noqa: E402

#: rows/s targets of issue 74 by batch size (a request's budget is the batch over the rate)
BUDGET_ROWS_PER_S = {1024: ISSUE_74["uji-knn", "/predict-region", "rows_per_s_1024"][0]}


def _best(fn, loops: int, repeats: int) -> float:
    """The best over ``repeats`` of the mean seconds of ``loops`` calls of ``fn`` (after one warm call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - start) / loops)
    return best


def _asgi_call(app, path: str, body: bytes):
    """One in-process request to ``app`` (an ASGI coroutine; the status is checked by the caller)."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"x-api-key", b"stages-key")]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}

    async def call():
        await app(scope, receive, send)
        return sent[0]["status"]

    return call


def _requests(bundle_dir, bodies: dict[int, bytes], loops, repeats: int) -> dict[int, dict[str, float]]:
    """Seconds of one whole request per batch size, through the service's app and the no-op's."""
    from benchmarks.noop_app import app as noop
    from service.app import create_app
    from service.settings import ServiceSettings

    app = create_app(ServiceSettings(bundle=bundle_dir, api_key="stages-key", log_level="warning", max_rows=4096,
                                     max_body_bytes=50_000_000, search_threads=1))

    async def run():
        out = {}
        async with app.router.lifespan_context(app):
            for n, body in bodies.items():
                out[n] = {}
                for label, target in (("request (service)", app), ("request (no-op)", noop)):
                    call = _asgi_call(target, "/predict-region", body)
                    status = await call()
                    if status != 200:
                        raise RuntimeError(f"{label} answered {status} for {n} rows")
                    best = float("inf")
                    for _ in range(repeats):
                        start = time.perf_counter()
                        for _ in range(loops(n)):
                            await call()
                        best = min(best, (time.perf_counter() - start) / loops(n))
                    out[n][label] = best
        return out

    return asyncio.run(run())


def measure(name: str, sizes: list[int], repeats: int) -> list[dict]:
    import orjson

    from models._validation import check_matrix
    from models.bundle import load_bundle
    from models.centres import search
    from service import inference
    from service.schemas import PredictRegionRequest

    search.set_search_threads(1)
    bundle_dir, centre = bundle(name)
    model = load_bundle(bundle_dir)
    model.prepare()  # as the service does when it loads a bundle
    X_all = np.load(bundle_dir.parent / "rows.npz")["X"]

    def loops(n: int) -> int:
        return max(3, int(3000 / n ** 0.8))

    def row(n: int, stage: str, seconds: float) -> dict:
        return {"bundle": name, "centre": centre, "rows": n, "stage": stage, "us": round(seconds * 1e6, 1),
                "per_row_us": round(seconds * 1e6 / n, 2)}

    bodies = {n: json.dumps({"features": X_all[:n].tolist()}).encode() for n in sizes}
    rows = []
    for n in sizes:
        raw, k = bodies[n], loops(n)
        body = PredictRegionRequest.model_validate_json(raw)
        X = model._features(body.features)
        answer = model.predict_region(body.features, kind="ellipsoid")
        answer_rows = inference.region_rows(answer, None)
        method = answer.method
        shape = model.methods[method].shape_
        stages = {
            "parse (pydantic)": lambda: PredictRegionRequest.model_validate_json(raw),
            "parse (orjson)": lambda: orjson.loads(raw),
            "to array": lambda: check_matrix(body.features, "features", n_columns=model.n_features),
            "features": lambda: model._features(body.features),
            "centre": lambda: model.centre.predict(X),
            f"shape ({method})": lambda: shape.predict_parts(X),
            "typicality": (lambda: model.typicality.assess(X)) if model.typicality is not None else None,
            "model": lambda: model.predict_region(body.features, kind="ellipsoid"),
            "answer rows": lambda: inference.region_rows(answer, None),
            "answer JSON": lambda: orjson.dumps({"regions": answer_rows}, option=orjson.OPT_SERIALIZE_NUMPY),
        }
        for stage, fn in stages.items():
            if fn is None:
                continue
            rows.append(row(n, stage, _best(fn, k, repeats)))
        print(f"{name}: {n} rows done", flush=True)
    for n, whole in _requests(bundle_dir, bodies, loops, repeats).items():
        rows += [row(n, stage, seconds) for stage, seconds in whole.items()]
    return rows


def _markdown(result: dict) -> str:
    lines = ["# Serving, stage by stage (in-process, one thread)", "",
             f"`{result['command']}` at {result['commit']} ({result['date']}; {result['machine']['cores']} "
             "cores). Each stage timed alone on the bundle's request rows, the best of "
             f"{result['repeats']} loops; microseconds per request (per row in brackets). The two `request` "
             "rows are whole requests through the ASGI app without a socket: the service's and the bare "
             "FastAPI no-op's on the same body.", ""]
    for name in dict.fromkeys(r["bundle"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["bundle"] == name]
        sizes = sorted({r["rows"] for r in rows})
        lines += [f"## {name} ({rows[0]['centre']} centre)", "",
                  "| stage | " + " | ".join(f"{n} row{'s' * (n > 1)}" for n in sizes) + " |",
                  "|---|" + "---:|" * len(sizes)]
        for stage in dict.fromkeys(r["stage"] for r in rows):
            cells = []
            for n in sizes:
                hit = next((r for r in rows if r["stage"] == stage and r["rows"] == n), None)
                cells.append("" if hit is None else f"{hit['us']:,.1f}" + ("" if n == 1 else f" ({hit['per_row_us']})"))
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
        budgets = [f"{n} rows at {rate:,.0f} rows/s: {n / rate * 1e3:.1f} ms a request"
                   for n, rate in BUDGET_ROWS_PER_S.items() if n in sizes]
        if budgets:
            lines += ["", "Budget (issue 74): " + "; ".join(budgets) + "."]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundles", default="default,uji-knn,uji-fingerprint", help="bundles of benchmarks.serving (comma-separated)")
    p.add_argument("--sizes", default="1,256,1024", help="batch sizes (comma-separated)")
    p.add_argument("--repeats", type=int, default=5, help="timed loops per stage; the best counts")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for name in args.bundles.split(","):
        rows += measure(name, sizes, args.repeats)
    result = {"commit": commit(), "command": command("serving_stages", argv), "date": utc_now(),
              "machine": machine(), "repeats": args.repeats, "rows": rows}
    write_json(RESULTS / "serving_stages.json", result, indent=1)
    write_text(RESULTS / "serving_stages.md", _markdown(result))
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
