"""Where to survey next: positions added by the plan against random and grid additions, at new positions of a site.

    python -m benchmarks.survey_plan [--seeds 0-9] [--uji-seeds 0-9] [--buildings 0,1,2] [--jobs 1]

Per site and seed a survey of :data:`START` positions is trained with defaults (``train()`` as ``lmve-train`` trains
a survey grouped by position) and :data:`ADD` positions are added three ways: ``plan`` (``lmve-plan``'s choice,
:func:`models.survey_plan.plan` on the start bundle's map), ``random`` (uniform over the site) and ``grid`` (a
regular grid over the site, blind to the survey); each survey of 60 positions is trained again with defaults.
Every model, and the textbook peer beside it (weighted 3-NN on exponential RSSI, a circle whose radius is the
90 % quantile of its leave-one-position-out errors, each position weighing the same), is measured at the same
new positions of the site: never proposed, never added.

* ``synthetic``: :func:`training.data.synthetic.make_survey`'s 40 x 25 m floor (8 beacons, 5 readings per
  position); the start survey is 30 positions uniform over the floor (a survey walked where it was convenient),
  the floor's rectangle is the boundary, readings at any proposed position are drawn by
  :func:`training.data.synthetic.survey_at`; the test is 600 positions uniform over the floor.
* ``uji_b<B>``: UJIIndoorLoc TrainingData, building ``B``, positions keyed by (position, floor) as in
  ``benchmarks.small_survey``; the start is 30 of them at random, the rest split at random into candidates (the
  walk's stand-ins: the plan, random and grid choose among them) and the test. The boundary is the building's
  positions' hull widened by half their spacing; ``grid`` takes the candidate nearest each point of a regular
  grid over it.

Columns: ``dataset, seed, start, added, strategy`` (``start`` for the 30-position survey), ``model`` (``lmve``:
the served method; ``peer``), ``method``, ``coverage`` (each test position's covered share of its readings,
averaged over positions), ``area`` (mean region, m^2), ``centre_error`` (m), ``map_error`` (the survey map's
expected area against the mean area measured at the test positions in each map cell, 16 cells along the longer
side: the median absolute relative error over cells; lmve only), ``map_loo`` (the map's own leave-one-position-out
estimate of that error), ``plan_s`` (map and plan seconds) and ``train_s``. Writes
``benchmarks/results/survey_plan.{csv,md}``; runs cached under ``benchmarks/cache/survey_plan/``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import (RESULTS, cache_dir, cached, command, commit, parallel, parse_seeds, write_rows,
                               write_text)

CACHE = cache_dir("survey_plan")
START = ADD = 30
READINGS, BEACONS, NEW_POSITIONS = 5, 8, 600
STRATEGIES = ("plan", "random", "grid")
LEVEL = 0.9
#: the map's cells along the longer side when measuring it cell by cell (about 4 synthetic test positions a cell)
MAP_CELLS = 16
COLUMNS = ("dataset", "seed", "start", "added", "strategy", "model", "method", "coverage", "area", "area_at_90",
           "centre_error",
           "map_error", "map_loo", "plan_s", "train_s")


# ---------------------------------------------------------------------------------------------- sites
def synthetic_site(seed: int) -> dict:
    """The synthetic site of ``seed``: start positions, the floor as boundary, readings anywhere, the test."""
    from training.data.synthetic import FLOOR, make_new_positions, survey_at

    start = np.random.default_rng([seed, 11]).uniform([0.0, 0.0], FLOOR, size=(START, 2))
    Xt, Yt, gt, _ = make_new_positions(NEW_POSITIONS, READINGS, BEACONS, survey_seed=seed, seed=7)
    boundary = np.array([[0.0, 0.0], [FLOOR[0], 0.0], [FLOOR[0], FLOOR[1]], [0.0, FLOOR[1]]])

    def readings(points, part):
        X, Y, g, _ = survey_at(points, READINGS, BEACONS, survey_seed=seed, seed=part)
        return X, Y, g

    return {"start": start, "boundary": boundary, "readings": readings, "test": (Xt, Yt, gt), "scale": 1.0,
            "candidates": None, "names": [f"beacon_{i + 1:02d}" for i in range(BEACONS)]}


def uji_site(building: int, seed: int, data_dir: str | None) -> dict:
    """Building ``building`` of UJIIndoorLoc: start units, candidate units, test units."""
    from models.survey_map import Extent
    from training.data.datasets import load_dataset

    full = load_dataset("indoor_localization", data_dir)
    rows = np.flatnonzero(np.asarray(full.meta["BUILDINGID"]) == building)
    key = np.column_stack([full.Y[rows], np.asarray(full.meta["FLOOR"])[rows]])
    keys, unit = np.unique(key, axis=0, return_inverse=True)
    unit = unit.ravel()
    order = np.random.default_rng([seed, building, 5]).permutation(len(keys))
    start, rest = order[:START], order[START:]
    pool, test = rest[: len(rest) // 2], rest[len(rest) // 2:]
    xy = keys[:, :2]
    boundary = Extent.of_survey(xy).polygon

    def readings(units):
        take = np.isin(unit, units)
        return full.X[rows[take]], full.Y[rows[take]], unit[take]

    Xt, Yt, gt = readings(test)
    return {"start": start, "boundary": boundary, "readings": lambda units, part=None: readings(units),
            "test": (Xt, Yt, gt), "scale": 1000.0, "candidates": xy[pool], "pool": pool, "xy": xy,
            "names": list(full.feature_names)}


def site(dataset: str, seed: int, data_dir: str | None) -> dict:
    return synthetic_site(seed) if dataset == "synthetic" else uji_site(int(dataset.removeprefix("uji_b")), seed,
                                                                        data_dir)


# ---------------------------------------------------------------------------------------------- additions
def grid_points(boundary: np.ndarray, n: int) -> np.ndarray:
    """``n`` points of a regular grid over ``boundary`` (the cells of a rows x cols grid over its bounding box whose
    centres lie inside, thinned evenly to ``n``)."""
    from models.survey_map import Extent

    extent = Extent.of_polygon(boundary)
    lo, hi = boundary.min(axis=0), boundary.max(axis=0)
    span = hi - lo
    for extra in range(0, 10 * n):
        cols = max(1, int(round(np.sqrt((n + extra) * span[0] / span[1]))))
        rows = int(np.ceil((n + extra) / cols))
        gx, gy = lo[0] + (np.arange(cols) + 0.5) * span[0] / cols, lo[1] + (np.arange(rows) + 0.5) * span[1] / rows
        G = np.stack(np.meshgrid(gx, gy), axis=-1).reshape(-1, 2)
        G = G[extent.contains(G)]
        if len(G) >= n:
            return G[np.round(np.linspace(0, len(G) - 1, n)).astype(int)]
    raise ValueError("no grid fits")


def nearest_unused(points: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Each of ``points`` snapped, in turn, to the nearest candidate not taken yet: the candidates' rows."""
    free, out = np.ones(len(candidates), bool), []
    for p in points:
        d = np.where(free, np.linalg.norm(candidates - p, axis=1), np.inf)
        out.append(int(np.argmin(d)))
        free[out[-1]] = False
    return np.asarray(out)


def additions(strategy: str, s: dict, survey, seed: int) -> tuple[np.ndarray, float]:
    """The added positions (synthetic: points; UJI: candidate rows) of ``strategy`` (``plan``, ``plan-<weight>``,
    ``random``, ``grid``) and the map and plan's seconds; ``survey`` the start bundle's."""
    rng = np.random.default_rng([seed, 23])
    if strategy.startswith("plan"):
        from models.survey_map import survey_map
        from models.survey_plan import plan

        weight = strategy.partition("-")[2] or "error-area"
        t0 = time.perf_counter()
        smap = survey_map(survey, boundary=s["boundary"])
        chosen = plan(smap, ADD, candidates=s["candidates"], seed=seed, weight=weight)
        seconds = time.perf_counter() - t0
        return (chosen.positions if s["candidates"] is None else chosen.index), seconds
    if s["candidates"] is None:
        if strategy == "random":
            lo, hi = s["boundary"].min(axis=0), s["boundary"].max(axis=0)
            return rng.uniform(lo, hi, size=(ADD, 2)), 0.0
        return grid_points(s["boundary"], ADD), 0.0
    if strategy == "random":
        return rng.choice(len(s["candidates"]), ADD, replace=False), 0.0
    return nearest_unused(grid_points(s["boundary"], ADD), s["candidates"]), 0.0


def start_survey(record: dict):
    """The start bundle's survey (:class:`models.survey.Survey`) as its record keeps it."""
    from models.survey import Survey

    kept = record["survey"]
    arrays = {k: np.asarray(kept[k], dtype=np.float64) for k in ("positions", "areas", "errors")}
    return Survey(positions=arrays["positions"], counts=np.ones(len(arrays["positions"]), np.int64), floors=None,
                  example_features=np.zeros((0, 1)), example_points=np.zeros((0, 2)), example_floors=None,
                  areas=arrays["areas"], errors=arrays["errors"])


# ---------------------------------------------------------------------------------------------- one survey
def fit(dataset: str, X: np.ndarray, Y: np.ndarray, names: list[str], seed: int, site=None):
    """``train()`` as ``lmve-train --seed SEED`` trains a survey's rows (its defaults: grouped by position, the RSSI
    step, ``--centre auto``; ``names``: the features'); with ``site`` (a polygon) ``--calibrate-for site`` over it.
    The model and its seconds."""
    from dataclasses import replace

    import torch

    from training.commands.train_args import build_parser, config_from_args
    from training.data.datasets import Dataset, group_by_position
    from training.pipeline import train

    torch.set_num_threads(1)
    flags = ["--quiet", "--seed", str(seed)] + (["--calibrate-for", "site"] if site is not None else [])
    config = replace(config_from_args(build_parser("").parse_args(flags)), site_boundary=site, progress=False)
    ds = group_by_position(Dataset(dataset, X, Y, names, ["x", "y"], "-"), auto=True)
    t0 = time.perf_counter()
    result = train(ds, config)
    return result.model, time.perf_counter() - t0


def per_position(values: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct groups' first rows, each group's mean of ``values``)."""
    _, first, codes = np.unique(groups, return_index=True, return_inverse=True)
    codes = codes.ravel()
    return first, np.bincount(codes, weights=values) / np.bincount(codes)


def map_error(model, s: dict, areas: np.ndarray, Yt: np.ndarray, gt: np.ndarray) -> float | None:
    """The survey map's expected area against the mean area measured at the test positions in each of its cells
    (:data:`MAP_CELLS` along the longer side): the median absolute relative error over cells holding one."""
    from models.survey_map import survey_map

    smap = survey_map(model.survey, boundary=s["boundary"], cells=MAP_CELLS)
    first, measured = per_position(areas, gt)
    at = Yt[first]
    d = np.abs(at[:, None, :] - smap.centres[None]).max(axis=-1)
    cell = np.argmin(d, axis=1)
    ok = d[np.arange(len(at)), cell] <= smap.cell / 2 * (1 + 1e-9)
    if not ok.any():
        return None
    cells, codes = np.unique(cell[ok], return_inverse=True)
    mean = np.bincount(codes.ravel(), weights=measured[ok]) / np.bincount(codes.ravel())
    return float(np.median(np.abs(smap.expected_area[cells] / mean - 1)))


def area_at(model, Xt: np.ndarray, Yt: np.ndarray, gt: np.ndarray, level: float = LEVEL) -> float:
    """The mean area at the level whose regions hold exactly ``level`` of the test positions (bisection on the
    asked coverage): the area at equal coverage, an oracle diagnostic (it reads the test's answers)."""
    lo, hi = 0.3, model.methods[model.primary_method].calibrator_.max_coverage
    area = np.nan
    for _ in range(14):
        mid = (lo + hi) / 2
        regions = model.predict_region(Xt, coverage=mid, typicality=False).regions
        covered = per_position(regions.contains(Yt).astype(float), gt)[1].mean()
        area = float(per_position(regions.volume(), gt)[1].mean())
        lo, hi = (mid, hi) if covered < level else (lo, mid)
    return area


def measure(model, s: dict) -> dict:
    """The served method's figures at the site's test positions (m, m^2) and the map's error."""
    Xt, Yt, gt = s["test"]
    regions = model.predict_region(Xt, typicality=False).regions
    areas = regions.volume()
    scale = s["scale"]
    first, covered = per_position(regions.contains(Yt).astype(float), gt)
    return {"model": "lmve", "method": model.primary_method, "coverage": float(covered.mean()),
            "area_at_90": area_at(model, Xt, Yt, gt) * scale**2,
            "area": float(per_position(areas, gt)[1].mean()) * scale**2,
            "centre_error": float(per_position(np.linalg.norm(regions.centers - Yt, axis=1), gt)[1].mean()) * scale,
            "map_error": map_error(model, s, areas, Yt, gt)}


def peer(X: np.ndarray, Y: np.ndarray, g: np.ndarray, s: dict) -> dict:
    """The textbook peer on the survey's rows, measured as :func:`measure` measures."""
    from benchmarks.new_phone import textbook_centres, textbook_features, unit_weighted_quantile

    Xt, Yt, gt = s["test"]
    F = textbook_features(np.concatenate([X, Xt]))
    Yall = np.concatenate([Y, Yt])
    n = len(Y)
    surveyed = np.arange(len(F)) < n
    others = np.zeros(len(Yt), bool)
    own = textbook_centres(F, Yall, np.arange(n), lambda rows: np.concatenate(
        [g[None, :] != g[rows, None], np.broadcast_to(others, (len(rows), len(others)))], axis=1))
    radius = unit_weighted_quantile(np.linalg.norm(own - Y, axis=1), g, LEVEL)
    centres = textbook_centres(F, Yall, np.arange(n, len(F)), lambda rows: surveyed[None, :])
    e = np.linalg.norm(centres - Yt, axis=1)
    scale = s["scale"]
    covered = per_position((e <= radius).astype(float), gt)[1]
    q = float(np.quantile(e, LEVEL))  # the circle that holds 90 % of the test readings: the oracle's radius
    return {"model": "peer", "method": "wknn3-circle", "coverage": float(covered.mean()),
            "area_at_90": float(np.pi * q**2) * scale**2,
            "area": float(np.pi * radius**2) * scale**2, "centre_error": float(per_position(e, gt)[1].mean()) * scale,
            "map_error": None}


def survey_rows(s: dict, added) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The survey's rows ``(X, Y, position)``: the start's, with ``added`` (points or candidate rows; None: none)."""
    if s["candidates"] is None:
        X, Y, g = s["readings"](s["start"], 0)
        if added is None:
            return X, Y, g
        Xa, Ya, ga = s["readings"](np.asarray(added), 1)
        return np.concatenate([X, Xa]), np.concatenate([Y, Ya]), np.concatenate([g, ga + START])
    units = s["start"] if added is None else np.concatenate([s["start"], s["pool"][np.asarray(added, dtype=int)]])
    return s["readings"](units)


def run(dataset: str, seed: int, strategy: str, data_dir: str | None) -> dict:
    """One survey's record (cached): ``strategy="start"`` trains the start survey and plans its additions; the
    others train the start with their additions (the plan's read from the start record)."""
    def make() -> dict:
        s = site(dataset, seed, data_dir)
        plan_s = None
        base, _, calibrate_for = strategy.partition("@")
        if base == "start":
            added = None
        elif base.startswith("plan"):
            added, plan_s = additions(base, s, start_survey(run(dataset, seed, "start", data_dir)), seed)
        else:
            added = additions(base, s, None, seed)[0]
        X, Y, g = survey_rows(s, added)
        model, train_s = fit(dataset, X, Y, s["names"], seed, s["boundary"] if calibrate_for == "site" else None)
        out = {"dataset": dataset, "seed": seed, "start": START, "added": 0 if added is None else ADD,
               "strategy": strategy, "train_s": train_s}
        rows = [{**out, **measure(model, s), "plan_s": plan_s}, {**out, **peer(X, Y, g, s)}]
        from models.survey_map import survey_map

        rows[0]["map_loo"] = survey_map(model.survey, boundary=s["boundary"]).accuracy["area"]["median_abs_rel_error"]
        record = {"rows": rows}
        if strategy == "start":
            sv = model.survey
            record["survey"] = {"positions": sv.positions.tolist(), "areas": sv.areas.tolist(),
                                "errors": sv.errors.tolist()}
        return record

    path = CACHE / dataset / f"seed{seed:03d}" / f"{strategy}.json"
    return cached(path, make)


# ---------------------------------------------------------------------------------------------- 200 positions
def cost(seed: int) -> dict:
    """A 200-position synthetic survey (``make_survey(200, 5, 8)``, its bundle cached): the map and a plan of 30
    timed in process (the median of 5 after a warm-up; the bundle loaded), ``lmve-plan --add 30`` timed end to
    end in a fresh process (its imports included) and whether it imported torch, and the map's error against
    600 uniform test positions, cell by cell (as ``map_error``)."""
    import subprocess
    import sys

    def make() -> dict:
        from models.bundle import load_bundle
        from models.survey_map import survey_map
        from models.survey_plan import plan
        from training.data.synthetic import make_new_positions, make_survey

        X, Y, _, _, names, _ = make_survey(n_points=200, readings=READINGS, n_beacons=BEACONS, seed=seed)
        site = synthetic_site(seed)
        path = CACHE / "cost" / f"seed{seed:03d}" / "bundle"
        if not (path / "manifest.json").is_file():
            from training.commands.train_args import build_parser, config_from_args
            from training.data.datasets import Dataset, group_by_position
            from training.pipeline import train

            config = config_from_args(build_parser("").parse_args(["--quiet", "--seed", str(seed)]))
            train(group_by_position(Dataset("survey200", X, Y, names, ["x", "y"], "-"), auto=True), config).save(path)
        model = load_bundle(path)
        seconds = []
        for _ in range(6):
            t0 = time.perf_counter()
            plan(survey_map(model.survey, method=model.primary_method), ADD, seed=seed)
            seconds.append(time.perf_counter() - t0)
        code = ("import sys, time; t0 = time.perf_counter(); from training.commands.plan import main; "
                f"main(['--bundle', {str(path)!r}, '--add', '{ADD}', '--out', {str(path.parent / 'plan.csv')!r}]); "
                "print(time.perf_counter() - t0, 'torch' in sys.modules)")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        inside, torch = done.stdout.strip().splitlines()[-1].split()
        Xt, Yt, gt, _ = make_new_positions(NEW_POSITIONS, READINGS, BEACONS, survey_seed=seed, seed=7)
        regions = model.predict_region(Xt, typicality=False).regions
        return {"seed": seed, "positions": len(model.survey.positions), "method": model.primary_method,
                "map_plan_s": float(np.median(seconds[1:])), "command_s": wall, "command_inside_s": float(inside),
                "torch_imported": torch == "True", "map_error": map_error(model, site, regions.volume(), Yt, gt),
                "map_loo": survey_map(model.survey).accuracy["area"]["median_abs_rel_error"]}

    return cached(CACHE / "cost" / f"seed{seed:03d}.json", make)


def cost_table(costs: list[dict]) -> list[str]:
    lines = ["| seed | positions | served | map + plan of 30, in process (s) | "
             "`lmve-plan --add 30`, whole command (s) | torch imported | map error (cells) | map's own estimate |",
             "|---:|---:|---|---:|---:|---|---:|---:|"]
    for c in costs:
        lines.append(f"| {c['seed']} | {c['positions']} | {c['method']} | {c['map_plan_s']:.3f} | "
                     f"{c['command_s']:.2f} | {'yes' if c['torch_imported'] else 'no'} | {_num(c['map_error'])} | "
                     f"{_num(c['map_loo'])} |")
    return lines


# ---------------------------------------------------------------------------------------------- the tables
def means(rows: list[dict], dataset: str, strategy: str, model: str) -> dict | None:
    """Means over seeds of one (dataset, strategy, model)."""
    sel = [r for r in rows if r["dataset"] == dataset and r["strategy"] == strategy and r["model"] == model]
    if not sel:
        return None
    out = {"runs": len(sel)}
    for k in ("coverage", "area", "area_at_90", "centre_error", "map_error", "map_loo", "plan_s"):
        v = [r[k] for r in sel if r.get(k) is not None]
        out[k] = float(np.mean(v)) if v else None
    out["min_coverage"] = float(min(r["coverage"] for r in sel))
    out["methods"] = ", ".join(f"{m} {n}" for m, n in sorted(
        {m: sum(r["method"] == m for r in sel) for m in {r["method"] for r in sel}}.items(), key=lambda kv: -kv[1]))
    return out


def ratio(rows: list[dict], dataset: str, a: str, b: str, model: str = "lmve") -> tuple[float, float] | None:
    """(the ratio of mean areas of strategies ``a`` and ``b``, the median of the per-seed ratios)."""
    pick = {(r["strategy"], r["seed"]): r["area"] for r in rows if r["dataset"] == dataset and r["model"] == model}
    seeds = sorted({s for (st, s) in pick if st == a} & {s for (st, s) in pick if st == b})
    if not seeds:
        return None
    A, B = np.array([pick[(a, s)] for s in seeds]), np.array([pick[(b, s)] for s in seeds])
    return float(A.mean() / B.mean()), float(np.median(A / B))


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(rows: list[dict]) -> list[str]:
    lines = ["| data | strategy | model | runs | coverage % (min) | area m^2 | area at 90 % (oracle) | "
             "centre error m | area / random's (median per seed) | map error (cells) | map's own estimate | plan s | "
             "served methods |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        for strategy in dict.fromkeys(["start", *STRATEGIES, *(r["strategy"] for r in rows)]):
            for model in ("lmve", "peer"):
                m = means(rows, dataset, strategy, model)
                if m is None:
                    continue
                rr = ratio(rows, dataset, strategy, "random", model) if strategy != "start" else None
                cover = f"{100 * m['coverage']:.1f} ({100 * m['min_coverage']:.1f})"
                cells = [dataset, strategy, model, m["runs"], cover,
                         f"{m['area']:,.0f}", f"{m['area_at_90']:,.0f}", f"{m['centre_error']:.2f}",
                         "-" if rr is None else f"{rr[0]:.2f} ({rr[1]:.2f})", _num(m["map_error"]),
                         _num(m["map_loo"]), _num(m["plan_s"]), m["methods"]]
                lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.survey_plan", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-9", help="synthetic seeds ('' for none)")
    parser.add_argument("--uji-seeds", default="0-9", help="UJIIndoorLoc seeds ('' for none)")
    parser.add_argument("--buildings", default="0,1,2", help="UJIIndoorLoc buildings")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--variants", default="", help="the plan's other weights to run too (plan-<weight>)")
    parser.add_argument("--site", action="store_true", help="also retrain every strategy with --calibrate-for site "
                        "(<strategy>@site; the synthetic site only, whose test positions are uniform over it)")
    parser.add_argument("--cost-seeds", default="0-2", help="seeds of the 200-position survey timed and mapped")
    parser.add_argument("--out", default="survey_plan", help="the results' stem under benchmarks/results/ (a "
                        "partial run, e.g. of --variants, written to variants/survey_plan/<name> keeps the main one)")
    args = parser.parse_args(argv)
    runs = [("synthetic", s) for s in (parse_seeds(args.seeds) if args.seeds else [])]
    runs += [(f"uji_b{b}", s) for b in (args.buildings.split(",") if args.buildings else [])
             for s in (parse_seeds(args.uji_seeds) if args.uji_seeds else [])]
    starts = parallel(run, [(d, s, "start", args.data_dir) for d, s in runs], args.jobs, "start surveys")
    strategies = STRATEGIES + tuple(f"plan-{w}" for w in args.variants.split(",") if w)
    strategies += tuple(f"{st}@site" for st in STRATEGIES) if args.site else ()
    others = parallel(run, [(d, s, st, args.data_dir) for d, s in runs for st in strategies
                            if "@" not in st or d == "synthetic"], args.jobs,
                      "added surveys")
    rows = [r for rec in starts + others for r in rec["rows"]]
    costs = [cost(seed) for seed in (parse_seeds(args.cost_seeds) if args.cost_seeds else [])]
    (RESULTS / args.out).parent.mkdir(parents=True, exist_ok=True)
    write_rows(RESULTS / f"{args.out}.csv", rows, COLUMNS, extra="ignore")
    write_text(RESULTS / f"{args.out}.md", "\n".join(report(rows, argv, costs)) + "\n")
    print("\n".join(table(rows)))
    return 0


DESCRIPTION = ("Per site and seed a survey of 30 positions is trained with lmve-train's defaults (grouped by "
               "position, `--centre auto`) and 30 positions are added three ways: `plan` (`lmve-plan` on the start "
               "bundle: its survey map and `models.survey_plan.plan`), `random` (uniform over the site) and `grid` "
               "(a regular grid over the site, blind to the survey); each 60-position survey is retrained with the "
               "defaults. Every model, and the textbook peer beside it (weighted 3-NN on exponential RSSI, a "
               "circle whose radius is the 90 % quantile of its leave-one-position-out errors, each position "
               "weighing the same), is measured at the same new positions of the site, never proposed and never "
               "added: coverage (each position's covered share of its readings, averaged over positions), mean "
               "area (m^2), `area at 90 % (oracle)` (the mean area at the level whose regions hold exactly 90 % "
               "of the test positions, found with the test's answers: the comparison at equal coverage) and the "
               "centre's mean error (m). Synthetic: the 40 x 25 m floor of `make_survey` (8 beacons, 5 readings a "
               "position), a start of 30 positions uniform over the floor, the floor as the plan's boundary, 600 "
               "uniform test positions. UJIIndoorLoc `uji_b<B>`: building B of TrainingData, positions keyed by "
               "(position, floor), a start of 30 at random, the rest split at random into candidates (what the "
               "plan, random and grid choose among) and the test; the plan's boundary is the building's positions' "
               "hull widened by half their spacing. `map error`: the start or final survey map's expected area "
               "against the mean area measured at the test positions of each of its cells (16 along the longer "
               "side), median absolute relative error over cells; `map's own estimate`: what the map says of "
               "itself (each surveyed position left out). `area / random's`: the ratio of mean areas over seeds "
               "(in brackets the median of the per-seed ratios). Plot-free; runs cached under "
               "`benchmarks/cache/survey_plan/`.")


def report(rows: list[dict], argv, costs: list[dict] = ()) -> list[str]:
    out = ["## Where to survey next: the plan against random and grid additions", "",
           f"Command: `{command('survey_plan', argv)}` at commit `{commit()}`. {DESCRIPTION}", "", *table(rows)]
    if costs:
        out += ["", "### The map and the plan on a 200-position survey", "",
                "`make_survey(200, readings=5, n_beacons=8, seed)` trained as lmve-train trains it; the map and a plan "
                "of 30 from the loaded bundle; the command in a fresh Python process (imports, reading the bundle, "
                "writing the CSV); the map's error against 600 uniform test positions, cell by cell.", "",
                *cost_table(costs)]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
