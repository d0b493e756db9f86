"""A site surveyed once, walked for two years: the UJI library (``uji_longterm``), month after month.

    python -m benchmarks.later_months [--months 2-25] [--cached-only]

The survey is month 1's 15 training sets, trained as a new user would (``lmve-train --dataset uji_longterm``,
defaults; cached under ``benchmarks/cache/later_months/``). The walks are each later month's test sets 1-5
(months 2-25) and month 25's sets 6-10 (the second phone), in recorded order, ten rows a request:

* ``served``: one running ``lmve-serve`` on loopback (fresh SQLite state, the radio watch on, as deployed)
  answers every walk, month after month, the phone named in ``X-LMVE-Device``; it sees readings only; every
  50 rows the walk waits until the service serves under its latest decision (a walk takes hours, its replay
  seconds: the wait keeps the building of a model in the replay's time where it is in the walk's);
* ``static``: the bundle as trained (what the service answers with ``LMVE_RADIO=off``);
* ``update5`` / ``update10``: ``lmve-update``'s model (:meth:`models.model.RegionModel.updated`) with 5 or 10
  of the month's positions re-walked (seeded), under the radio the watch decided, scored on the month's other
  positions;
* ``textbook``: weighted 3-NN on dBm (not heard: -105 dBm, every survey row a reference), a circle whose radius is
  the 90 % quantile of the survey's leave-one-position-out errors, each position weighing the same.

Per month and phone: coverage at 0.9, mean area (m^2), centre mean and p90 error (m), and for ``served`` the
month-end decision (``GET /model``'s ``radio``): transmitters gone and new, the phone's offset (dB). Writes
``benchmarks/results/later_months.{csv,md}``. Resumable: the rows, the service's state file and the replayed
watch are kept after each walk (``progress.json`` in the cache); a run with the same arguments at the same
commit goes on after the last walk done, its service restarted on the state it had then (as a deployed one
would be restarted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, cache_dir, command, commit, parse_seeds, write_csv, write_text

CACHE = cache_dir("later_months")
LEVEL = 0.9
#: rows a request
BATCH = 10
#: rows between two waits for the service to serve under its latest decision (``Service.settle``)
SETTLE_EVERY = 50
#: the textbook's constants: not heard (dBm), neighbours
NOT_HEARD, K = -105.0, 3
WALK_SETS = {"S3": (1, 2, 3, 4, 5), "A5": (6, 7, 8, 9, 10)}
#: the results' stem of the full run; another (``--out``) keeps its own cache files beside the full run's
STEM = "later_months"
COLUMNS = ["month", "phone", "method", "rows", "coverage", "area", "centre_mean", "centre_p90", "gone", "new",
           "offset_db", "served_method", "commit"]


def bundle(ds, across: bool = False) -> tuple[Path, object]:
    """The survey's bundle (trained once, cached): its path and the model. ``across``: trained with
    ``--calibrate-across campaign`` (the survey's 15 walks each a unit)."""
    from models.bundle import load_bundle

    path = CACHE / ("bundle-across" if across else "bundle")
    if not (path / "manifest.json").is_file():
        from training.commands.train_args import build_parser, config_from_args
        from training.pipeline import train

        argv = ["--dataset", "uji_longterm", "--quiet"] + (["--calibrate-across", "campaign"] if across else [])
        t0 = time.perf_counter()
        result = train(ds, config_from_args(build_parser("").parse_args(argv)))
        result.save(path)
        print(f"later_months: trained {path.name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path, load_bundle(path)


# ---------------------------------------------------------------------------------------------- the textbook peer
def textbook_rows(X: np.ndarray) -> np.ndarray:
    return np.where(X == 100, NOT_HEARD, X).astype(np.float32) - np.float32(NOT_HEARD)


def knn(F_ref, Y_ref, F_q, exclude=None):
    """Weighted 3-NN centres of ``F_q``; ``exclude`` (q, m) bool rows not to use (leave-one-position-out)."""
    norms = np.einsum("ij,ij->i", F_ref, F_ref)
    out = np.empty((len(F_q), Y_ref.shape[1]))
    for s in range(0, len(F_q), 512):
        Q = F_q[s:s + 512]
        D = norms[None, :] - 2.0 * Q @ F_ref.T + np.einsum("ij,ij->i", Q, Q)[:, None]
        if exclude is not None:
            D[exclude(slice(s, s + len(Q)))] = np.inf
        idx = np.argpartition(D, K, axis=1)[:, :K]
        d = np.sqrt(np.maximum(np.take_along_axis(D, idx, axis=1), 0.0)).astype(np.float64)
        w = np.where((d == 0).any(axis=1, keepdims=True), (d == 0).astype(float), 1.0 / np.maximum(d, 1e-12))
        out[s:s + len(Q)] = np.einsum("qk,qkn->qn", w / w.sum(axis=1, keepdims=True), Y_ref[idx])
    return out


class Textbook:
    """Weighted 3-NN on dBm and a circle calibrated on the survey's leave-one-position-out errors."""

    def __init__(self, ds):
        self.F, self.Y = textbook_rows(ds.X), ds.Y
        pos = np.unique(ds.Y, axis=0, return_inverse=True)[1].ravel()
        own = knn(self.F, self.Y, self.F, exclude=lambda rows: pos[rows, None] == pos[None, :])
        e = np.linalg.norm(own - self.Y, axis=1)
        w = 1.0 / np.bincount(pos)[pos]
        order = np.argsort(e, kind="stable")
        self.radius = float(e[order][np.searchsorted(np.cumsum(w[order]) / w.sum(), LEVEL)])

    def answer(self, X):
        return knn(self.F, self.Y, textbook_rows(X)), np.full(len(X), np.pi * self.radius ** 2)


# ---------------------------------------------------------------------------------------------- the service
def copy_state(source: Path, target: Path) -> None:
    import sqlite3

    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


class Service:
    """``lmve-serve`` on the bundle, on loopback, with a fresh SQLite state (``fresh=False``: the state kept after
    the last walk, :meth:`keep_state`) and the radio watch on (defaults):
    the walks are its queries, ten rows a request, the phone named in ``X-LMVE-Device``."""

    def __init__(self, path: Path, root: Path, fresh: bool = True):
        import httpx

        from benchmarks.fleet import start_replica, wait_ready
        from benchmarks.load.run_load import KEY, free_port

        root.mkdir(parents=True, exist_ok=True)
        for name in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm"):
            (root / name).unlink(missing_ok=True)
        if not fresh:  # the state as it was after the last walk done (a walk cut off midway is walked again)
            copy_state(root / "after_walk.sqlite", root / "state.sqlite")
        self.root = root
        port = free_port()
        self.base, self.headers = f"http://127.0.0.1:{port}", {"X-API-Key": KEY}
        self.proc = start_replica(path, port, {"LMVE_STATE_URL": f"sqlite:///{root / 'state.sqlite'}",
                                               "LMVE_RADIO": "adapt", "LMVE_GRPC_PORT": "0"},  # two can run
                                  root / "serve.log")
        wait_ready(self.base, self.proc, 300.0)
        self.http = httpx.Client(base_url=self.base, headers=self.headers, timeout=60.0)

    def regions(self, X: np.ndarray, device: str) -> list[dict]:
        r = self.http.post("/predict-region", json={"features": X.tolist()}, headers={"X-LMVE-Device": device})
        r.raise_for_status()
        return r.json()["regions"]

    def radio(self) -> dict:
        return self.http.get("/model").raise_for_status().json()["radio"]

    def settle(self, timeout: float = 120.0) -> dict:
        """Wait until the service serves under the watch's latest decision (``followed``), as it would long
        before the next query in a walk that takes hours: the walk is replayed in seconds, the building of a
        model under a new decision is not hurried; the radio summary."""
        deadline = time.monotonic() + timeout
        while True:
            radio = self.radio()
            if radio.get("followed", True) or time.monotonic() > deadline:
                return radio
            time.sleep(0.1)

    def keep_state(self) -> None:
        """Copy the live state file (SQLite's online backup) to where a resumed run starts from."""
        copy_state(self.root / "state.sqlite", self.root / "after_walk.sqlite")

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(30)


def served_figures(rows: list[dict], Y: np.ndarray):
    """``(centres, areas, inside)`` of the service's region rows against the true positions ``Y``: inside when
    ``(y - c)^T C^-1 (y - c) <= 1``."""
    c = np.array([r["center"] for r in rows], dtype=float)
    C = np.array([r["shape"] for r in rows], dtype=float)
    area = np.array([r["volume"] for r in rows], dtype=float)
    bounded = np.isfinite(C).all(axis=(1, 2))
    d = Y - c
    inside = np.ones(len(Y), dtype=bool)
    if bounded.any():
        sol = np.linalg.solve(C[bounded], d[bounded][..., None])[..., 0]
        inside[bounded] = np.einsum("ij,ij->i", d[bounded], sol) <= 1.0
    return c, area, inside


def score(answers, Y) -> dict:
    centres = np.vstack([a[0] for a in answers])
    area = np.concatenate([a[1] for a in answers])
    inside = np.concatenate([a[2] for a in answers])
    e = np.linalg.norm(centres - Y, axis=1)
    return {"rows": int(len(Y)), "coverage": float(inside.mean()), "area": float(area.mean()),
            "centre_mean": float(e.mean()), "centre_p90": float(np.quantile(e, 0.9))}


def regions_of(answer, Y):
    r = answer.regions
    return r.centers, r.volume("lebesgue"), r.contains(Y)


# ---------------------------------------------------------------------------------------------- re-walked positions
def updated_rows(model, watch, walk, n_positions: int, seed: int) -> tuple[dict, np.ndarray]:
    """``lmve-update``'s model with ``n_positions`` of the month's positions (seeded), under the radio the watch
    decides against its map, scored on the month's other positions; and which rows were scored."""
    from models.radio import RadioWatch

    codes = np.unique(walk.Y, axis=0, return_inverse=True)[1].ravel()
    chosen = np.random.default_rng([seed, n_positions]).choice(codes.max() + 1, n_positions, replace=False)
    walked = np.isin(codes, chosen)
    new, _ = model.updated(walk.X[walked], walk.Y[walked], codes[walked])
    view = RadioWatch(new.radio_baseline).restore(watch.state()).view()
    answer = new.adapted(view).predict_region(walk.X[~walked], typicality=False)
    return score([regions_of(answer, walk.Y[~walked])], walk.Y[~walked]), ~walked


def cached(name: str, stem: str = STEM) -> Path:
    """The cache path of ``name`` (``progress.json``, ``service``...) for the run written to ``stem``."""
    base, dot, ext = name.partition(".")
    return CACHE / (name if stem == STEM else f"{base}-{stem}{dot}{ext}")


def run(months: list[int], updates: tuple[int, ...] = (5, 10), across: bool = False,
        stem: str = STEM) -> list[dict]:
    from tqdm.auto import tqdm

    from models.radio import RadioWatch
    from training.data.datasets import load_dataset
    from training.data.longterm import load_sets

    ds = load_dataset("uji_longterm")
    variants = {"": bundle(ds)} | ({"_across": bundle(ds, across=True)} if across else {})
    model = variants[""][1]
    peer = Textbook(ds)
    watch = RadioWatch(model.radio_baseline)  # the service's counts, replayed here for lmve-update's rows
    stamp = commit()
    walks = [(m, ph) for m in months for ph in (("S3", "A5") if m == 25 else ("S3",))]
    progress = cached("progress.json", stem)
    key = {"months": months, "updates": list(updates), "across": across, "commit": stamp}
    done = json.loads(progress.read_text()) if progress.is_file() else {}
    resumed = done.get("key") == key and "uncommitted" not in stamp
    rows = done["rows"] if resumed else []
    if resumed:
        watch.restore(done["watch"])
        print(f"later_months: resuming after {len(done['walks'])} of {len(walks)} walks", file=sys.stderr)
    finished = [tuple(w) for w in done.get("walks", ())] if resumed else []
    services = {tag: Service(path, cached(f"service{tag}", stem), fresh=not resumed)
                for tag, (path, _) in variants.items()}
    try:
        for month, phone in tqdm(walks, desc="months", initial=len(finished)):
            if (month, phone) in finished:
                continue
            walk = load_sets(month, "tst", WALK_SETS[phone])
            X, Y = walk.X, walk.Y
            out = {name: [] for tag in variants for name in (f"served{tag}", f"static{tag}")} | {"textbook": []}
            for s in tqdm(range(0, len(X), BATCH), desc=f"month {month} {phone}", leave=False):
                x, y = X[s:s + BATCH], Y[s:s + BATCH]
                for tag, (_, m) in variants.items():
                    if s % SETTLE_EVERY == 0:
                        services[tag].settle()
                    out[f"served{tag}"].append(served_figures(services[tag].regions(x, phone), y))
                    out[f"static{tag}"].append(regions_of(m.predict_region(x, typicality=False), y))
                watch.observe(x, phone)
                c, a = peer.answer(x)
                out["textbook"].append((c, a, np.linalg.norm(c - y, axis=1) <= peer.radius))
            radios = {tag: service.radio() for tag, service in services.items()}
            for method, answers in out.items():
                radio = radios.get(method[len("served"):]) if method.startswith("served") else None
                extra = {"gone": "", "new": "", "offset_db": ""} if radio is None else {
                    "gone": radio["gone"], "new": radio["new"],
                    "offset_db": radio["offsets_db"].get(phone, radio["offsets_db"].get("*", 0.0))}
                tag = "_across" if method.endswith("_across") else ""
                served = "circle" if method == "textbook" else variants[tag][1].primary_method
                rows.append({"month": month, "phone": phone, "method": method, **score(answers, Y), **extra,
                             "served_method": served, "commit": stamp})
            for k in updates:
                figures, _ = updated_rows(model, watch, walk, k, seed=month)
                rows.append({"month": month, "phone": phone, "method": f"update{k}", **figures, "gone": "",
                             "new": "", "offset_db": "", "served_method": model.primary_method, "commit": stamp})
            finished.append((month, phone))
            for service in services.values():
                service.keep_state()
            write_text(progress, json.dumps({"key": key, "rows": rows, "walks": finished, "watch": watch.state()}))
    finally:
        for service in services.values():
            service.close()
    return rows


def summarise(df, argv) -> str:
    lines = ["# A year later: the UJI library walked for 25 months", "",
             f"Command: `{command('later_months', argv)}` at commit {commit()}. Survey: month 1's 15 training sets "
             "(8,640 rows, 48 positions), `lmve-train --dataset uji_longterm` with defaults. Walks: each month's test "
             "sets 1-5 (phone S3; 3,120 rows at 212 other positions), month 25's sets 6-10 (phone A5), in recorded "
             "order, ten rows a request. `served`: one running `lmve-serve` month after month, following the radio "
             "its queries show (readings only); `static`: the bundle as trained; `update5`/`update10`: after "
             "`lmve-update` with 5 / 10 of the month's positions, scored on its other positions; `textbook`: weighted "
             "3-NN on dBm with a circle from the survey's leave-one-position-out errors. Coverage at 0.9, mean area "
             "m^2, centre error m; gone / new / offset: the service's decision at the month's end.", "",
             "| month | phone | served % | static % | update5 % | update10 % | textbook % | served m^2 | static m^2 | "
             "update10 m^2 | textbook m^2 | served mean m | static mean m | update10 mean m | textbook mean m | "
             "served p90 m | gone | new | offset dB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def pct(r, m):
        return f"{100 * r[m].coverage:.1f}" if m in r else ""

    for (month, phone), part in df.groupby(["month", "phone"], sort=True):
        r = {m: part[part.method == m].iloc[0] for m in part.method}
        s, st, t, u = r["served"], r["static"], r["textbook"], r.get("update10")
        lines.append(f"| {month} | {phone} | {pct(r, 'served')} | {pct(r, 'static')} | {pct(r, 'update5')} | "
                     f"{pct(r, 'update10')} | {pct(r, 'textbook')} | {s.area:.1f} | {st.area:.1f} | "
                     f"{'' if u is None else f'{u.area:.1f}'} | {t.area:.1f} | {s.centre_mean:.2f} | "
                     f"{st.centre_mean:.2f} | {'' if u is None else f'{u.centre_mean:.2f}'} | {t.centre_mean:.2f} | "
                     f"{s.centre_p90:.2f} | {s.gone} | {s.new} | {float(s.offset_db):+.1f} |")
    s3 = df[df.phone == "S3"]
    walked = sorted(int(m) for m in s3.month.unique())
    span = (f"{walked[0]}-{walked[-1]}" if walked == list(range(walked[0], walked[-1] + 1))
            else ", ".join(map(str, walked)))
    lines += ["", f"| method | mean coverage % (S3, months {span}) | worst month % | mean area m^2 | x month 2's served "
              "area | centre mean m, months 11-25 | x month 2's served |", "|---|---|---|---|---|---|---|"]
    first = s3[(s3.method == "served") & (s3.month == s3.month.min())].iloc[0]
    for method in ("served", "static", "update5", "update10", "served_across", "static_across", "textbook"):
        part = s3[s3.method == method]
        if part.empty:
            continue
        late = part[part.month >= 11]
        late_mean = late.centre_mean.mean() if len(late) else float("nan")
        lines.append(f"| {method} | {100 * part.coverage.mean():.1f} | {100 * part.coverage.min():.1f} | "
                     f"{part.area.mean():.1f} | {part.area.mean() / first.area:.2f} | {late_mean:.2f} | "
                     f"{late_mean / first.centre_mean:.2f} |")
    lines += ["", "Targets: served coverage >= 85 % every month and >= 88 % on average over months 2-25; mean area at "
              "most 1.3x month 2's served area; centre mean error at months 11-25 at most 1.15x month 2's; the second "
              "phone >= 85 %; months 2-6 within one point of static; update10 >= 88 % at <= 1.2x month 2's area."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.later_months", description=__doc__.split("\n\n")[0])
    p.add_argument("--months", default="2-25", help="walked months, e.g. 2-25 (default) or 2,11,25")
    p.add_argument("--across", action="store_true", help="also a bundle trained with --calibrate-across campaign "
                   "(methods served_across, static_across)")
    p.add_argument("--no-update", action="store_true", help="without the update5/update10 rows")
    p.add_argument("--out", default=STEM, metavar="STEM", help="results written to "
                   "benchmarks/results/STEM.{md,csv} (default later_months; e.g. later_months_across for an --across "
                   "run on a few months, beside the full run's)")
    p.add_argument("--cached-only", action="store_true", help="summarise the cached run, run nothing")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    import pandas as pd

    path = cached("rows.json", args.out)
    if args.cached_only:
        if not path.is_file():
            print("later_months: nothing cached yet", file=sys.stderr)
            return 1
        rows = json.loads(path.read_text())
    else:
        rows = run(parse_seeds(args.months), () if args.no_update else (5, 10), args.across, args.out)
        write_text(path, json.dumps(rows))
    df = pd.DataFrame(rows)
    write_csv(df[COLUMNS], RESULTS / f"{args.out}.csv")
    text = summarise(df, argv)
    write_text(RESULTS / f"{args.out}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
