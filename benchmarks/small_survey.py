"""Small surveys: coverage and area at new positions of the same site, split against the served rule.

    python -m benchmarks.small_survey [--sizes 20,30,50,100,200,400] [--seeds 0-19] [--uji-sizes 30,100]
                                      [--uji-seeds 0-9] [--jobs 1]

Synthetic (``dataset=synthetic``): per size ``n`` and seed ``s`` a venue survey
``training.data.synthetic.make_survey(n, readings=5, n_beacons=8, seed=s)`` (a 40 x 25 m floor), trained as
``lmve-train --csv survey.csv --targets x_m,y_m`` trains it (grouped by position, ``--centre auto``, the default
methods, ``--seed s``) twice: ``--calibration split`` (``rule=split``, the rule before cross-fitting) and
``--calibration cross-fit``. ``rule=served`` is the one ``--calibration auto`` picks (a copy of that row,
``mode`` names it). Coverage is measured at 600 **new positions of the same site**
(``make_new_positions(600, 5, 8, survey_seed=s, where="floor")``: uniform over the floor, read by the survey's
devices through its beacons), each position's covered share of its 5 readings, averaged over positions;
and ``coverage_grid`` at about 600 positions drawn as the survey drew its own (:func:`grid_positions`:
exchangeable with the surveyed ones, the guarantee's assumption; uniform positions include the floor's
margins beyond the outermost surveyed ones, where a centre extrapolates).

UJIIndoorLoc (``dataset=uji_b0``): building 0 of TrainingData; a survey is ``n`` of its positions (distinct
position and floor) drawn at random per seed with all their readings; the test is every other position of
the building, each weighing the same. Areas in m^2, errors in m.

Per row: the served method's mean region area, the centre's mean Euclidean error at the new positions,
``efficiency = area / (pi centre_error^2)``, and ``circle_floor``: the same ratio for the smallest circle
around the same centres that covers 90 % of the new readings, known only with the answers: no circle of
one radius can be more efficient on these centres. Also the survey's extent (the surveyed positions'
bounding box and convex hull, m^2). Writes ``benchmarks/results/small_survey.{csv,md}``; runs cached under
``benchmarks/cache/small_survey/``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import (RESULTS, cache_dir, cached, command, commit, parallel, parse_seeds, write_rows,
                               write_text)

CACHE = cache_dir("small_survey")
NEW_POSITIONS = 600
READINGS = 5
BEACONS = 8
COLUMNS = ("dataset", "positions", "seed", "rule", "mode", "method", "coverage", "area", "centre_error",
           "efficiency", "circle_floor", "coverage_grid", "area_grid", "centre_error_grid", "bbox_area", "hull_area",
           "calibration_groups", "half_factor", "twice_factor", "train_s")


def extent(points: np.ndarray) -> tuple[float, float]:
    """(bounding-box area, convex-hull area) of the surveyed positions."""
    from scipy.spatial import ConvexHull

    span = points.max(axis=0) - points.min(axis=0)
    return float(np.prod(span)), float(ConvexHull(points).volume)


def per_position(inside: np.ndarray, groups: np.ndarray) -> float:
    """Each position's covered share of its readings, averaged over positions."""
    _, codes = np.unique(groups, return_inverse=True)
    return float(np.mean(np.bincount(codes, weights=inside) / np.bincount(codes)))


def grid_positions(n: int, seed: int):
    """About :data:`NEW_POSITIONS` fresh positions drawn as the survey drew its own (a fresh jitter of its grid
    of ``n`` cells, ``make_new_positions(n, where="grid")`` repeated): new positions exchangeable with the
    surveyed ones, where the guarantee's assumption holds. ``(X, Y, position)``."""
    from training.data.synthetic import make_new_positions

    parts = [make_new_positions(n, READINGS, BEACONS, survey_seed=seed, seed=100 + k, where="grid")
             for k in range(max(1, NEW_POSITIONS // n))]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] + k * n for k, p in enumerate(parts)]))


def synthetic(n: int, seed: int):
    from training.data.datasets import Dataset, group_by_position
    from training.data.synthetic import make_new_positions, make_survey

    X, Y, _, _, fn, tn = make_survey(n_points=n, readings=READINGS, n_beacons=BEACONS, seed=seed)
    ds = group_by_position(Dataset("survey", X, Y, fn, tn, "-"), auto=True)
    Xn, Yn, gn, _ = make_new_positions(NEW_POSITIONS, READINGS, BEACONS, survey_seed=seed, seed=7)
    return ds, Xn, Yn, gn, 1.0


def uji(n: int, seed: int, data_dir: str | None):
    from training.data.datasets import Dataset, group_by_position, load_dataset

    full = load_dataset("indoor_localization", data_dir)
    b0 = np.flatnonzero(np.asarray(full.meta["BUILDINGID"]) == 0)
    key = np.column_stack([full.Y[b0], np.asarray(full.meta["FLOOR"])[b0]])
    _, pos = np.unique(key, axis=0, return_inverse=True)
    pos = pos.ravel()
    chosen = np.random.default_rng([seed, 97]).choice(pos.max() + 1, size=n, replace=False)
    keep = np.isin(pos, chosen)
    rows, test = b0[keep], b0[~keep]
    ds = Dataset("uji_b0", full.X[rows], full.Y[rows], full.feature_names, full.target_names, "-",
                 meta={"FLOOR": np.asarray(full.meta["FLOOR"])[rows]})
    ds = group_by_position(ds, auto=True)
    return ds, full.X[test], full.Y[test], pos[~keep], 1000.0


def run_one(dataset: str, n: int, seed: int, mode: str, data_dir: str | None) -> dict:
    def make() -> dict:
        import torch

        from training.pipeline import TrainConfig, train

        torch.set_num_threads(1)
        ds, Xn, Yn, gn, scale = synthetic(n, seed) if dataset == "synthetic" else uji(n, seed, data_dir)
        t0 = time.perf_counter()
        result = train(ds, TrainConfig(seed=seed, centre="auto", calibration_mode=mode, progress=False))
        train_s = time.perf_counter() - t0
        model = result.model
        method = model.selection["primary"]
        regions = model.predict_region(Xn, method=method, typicality=False).regions
        err = np.linalg.norm(regions.centers - Yn, axis=1) * scale
        area = float(regions.volume("lebesgue").mean()) * scale**2
        r90 = float(np.quantile(err, 0.9))
        positions = np.unique(ds.Y, axis=0) * scale
        bbox, hull = extent(positions)
        grid = {}
        if dataset == "synthetic":
            Xg, Yg, gg = grid_positions(n, seed)
            at = model.predict_region(Xg, method=method, typicality=False).regions
            grid = {"coverage_grid": per_position(at.contains(Yg), gg), "area_grid": float(at.volume("lebesgue").mean()),
                    "centre_error_grid": float(np.linalg.norm(at.centers - Yg, axis=1).mean())}
        cross = result.split.cross_fit or {}
        size = result.survey_size or {}
        calibrator = model.methods[method].calibrator_
        return {"dataset": dataset, "positions": n, "seed": seed, "rule": mode,
                "mode": cross.get("mode", "split"), "method": method,
                "coverage": per_position(regions.contains(Yn), gn), "area": area,
                "centre_error": float(err.mean()), "efficiency": area / (np.pi * err.mean() ** 2),
                "circle_floor": r90**2 / err.mean() ** 2, "bbox_area": bbox, "hull_area": hull,
                **grid, "calibration_groups": int(calibrator.n_calibration_), "half_factor": size.get("half_factor"),
                "twice_factor": size.get("twice_factor"), "train_s": train_s}

    return cached(CACHE / dataset / f"n{n}" / f"{mode}_seed{seed:03d}.json", make)


def served_mode(dataset: str, n: int, seed: int, data_dir: str | None) -> tuple[str, str]:
    """What ``--calibration auto`` does on this survey: ``(mode, why)`` without training."""
    from training.pipeline.config import TrainConfig
    from training.calibration.cross_fit import resolve_mode

    ds = (synthetic(n, seed) if dataset == "synthetic" else uji(n, seed, data_dir))[0]
    return resolve_mode(ds, TrainConfig(seed=seed, centre="auto"))


def summary(rows: list[dict]) -> list[str]:
    import pandas as pd

    df = pd.DataFrame(rows)
    lines = ["| data | positions | rule | runs | coverage % (min-max) | at grid positions % (min-max) | area m^2 "
             "| centre error m | efficiency | circle floor | area / split's (median per seed) | area / bbox "
             "| served methods |",
             "|---|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for (data, n), g in df.groupby(["dataset", "positions"], sort=False):
        split_area = g[g.rule == "split"].set_index("seed").area
        for rule in ("split", "cross-fit", "served"):
            r = g[g.rule == rule]
            if r.empty:
                continue
            per_seed = r.set_index("seed").area / split_area
            ratio = f"{r.area.mean() / split_area.mean():.2f} ({per_seed.median():.2f})"
            methods = ", ".join(f"{k} {v}" for k, v in r.method.value_counts().items())
            grid = "-" if "coverage_grid" not in r or r.coverage_grid.isna().all() else (
                f"{100 * r.coverage_grid.mean():.1f} ({100 * r.coverage_grid.min():.1f}-"
                f"{100 * r.coverage_grid.max():.1f})")
            lines.append(f"| {data} | {n} | {rule} | {len(r)} | {100 * r.coverage.mean():.1f} "
                         f"({100 * r.coverage.min():.1f}-{100 * r.coverage.max():.1f}) | {grid} | {r.area.mean():,.0f} | "
                         f"{r.centre_error.mean():.2f} | {r.efficiency.mean():.2f} | {r.circle_floor.mean():.2f} | "
                         f"{ratio} | {(r.area / r.bbox_area).mean():.2f} | {methods} |")
    return lines


def guidance(rows: list[dict]) -> list[str]:
    """The survey-size estimate against what was measured: per dataset and size, the cross-fit rule's mean area
    times its ``half_factor`` (``twice_factor``) beside the cross-fit's mean area measured at half (twice) the
    size, where the benchmark ran it (one rule throughout: ``auto`` changes rule at 400 positions, which
    the estimate, about positions alone, does not foresee)."""
    import pandas as pd

    df = pd.DataFrame([r for r in rows if r["rule"] == "cross-fit" and r.get("half_factor") is not None])
    # a run without an estimate (the served shape could not be fitted on half the survey) is left out
    if df.empty:
        return []
    measured = df.groupby(["dataset", "positions"]).area.mean()
    lines = ["| data | positions | estimate: half | measured at half | estimate: twice | measured at twice |",
             "|---|---:|---:|---:|---:|---:|"]
    for (data, n), g in df.groupby(["dataset", "positions"], sort=False):
        half, twice = (g.area * g.half_factor).mean(), (g.area * g.twice_factor).mean()
        at_half, at_twice = measured.get((data, n // 2)), measured.get((data, 2 * n))
        lines.append(f"| {data} | {n} | {half:,.0f} | {'-' if at_half is None else f'{at_half:,.0f}'} | "
                     f"{twice:,.0f} | {'-' if at_twice is None else f'{at_twice:,.0f}'} |")
    return lines


def plot(rows: list[dict], path) -> None:
    """Coverage and mean area against the number of positions, per rule (synthetic: means over seeds with the
    10th-90th percentile band; UJIIndoorLoc's subsets as points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame([r for r in rows if r["rule"] != "served"])
    fig, (cov, area) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for rule, colour in (("split", "tab:red"), ("cross-fit", "tab:blue")):
        g = df[(df.dataset == "synthetic") & (df.rule == rule)].groupby("positions")
        for ax, col, scale in ((cov, "coverage", 100.0), (area, "area", 1.0)):
            mean, lo, hi = (g[col].mean() * scale, g[col].quantile(0.1) * scale, g[col].quantile(0.9) * scale)
            ax.plot(mean.index, mean.values, "o-", color=colour, label=f"synthetic, {rule}")
            ax.fill_between(mean.index, lo.values, hi.values, color=colour, alpha=0.15)
        u = df[(df.dataset != "synthetic") & (df.rule == rule)].groupby("positions")
        cov.plot(u.coverage.mean().index, 100 * u.coverage.mean().values, "s--", color=colour, mfc="none",
                 label=f"UJIIndoorLoc building 0, {rule}")
    cov.axhspan(88, 93, color="0.9", zorder=0, label="target 88-93 %")
    cov.set(xscale="log", xlabel="surveyed positions", ylabel="coverage at new positions (%)")
    area.set(xscale="log", yscale="log", xlabel="surveyed positions", ylabel="mean region area, synthetic (m^2)")
    from training.data.synthetic import FLOOR

    area.axhline(FLOOR[0] * FLOOR[1], color="0.5", ls=":", label=f"the site ({FLOOR[0]:.0f} x {FLOOR[1]:.0f} m)")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    sizes = sorted(df.positions.unique())
    for ax in (cov, area):
        ax.set_xticks(sizes)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7)
    fig.suptitle("90 % regions of a venue survey at new positions of the same site")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="20,30,50,100,200,400")
    p.add_argument("--seeds", default="0-19")
    p.add_argument("--uji-sizes", default="30,100")
    p.add_argument("--uji-seeds", default="0-9")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--jobs", type=int, default=1)
    args = p.parse_args(argv)
    tasks = [("synthetic", int(n), s) for n in args.sizes.split(",") if n for s in parse_seeds(args.seeds)]
    tasks += [("uji_b0", int(n), s) for n in args.uji_sizes.split(",") if n for s in parse_seeds(args.uji_seeds)]
    runs = parallel(run_one, [(*t, mode, args.data_dir) for t in tasks for mode in ("split", "cross-fit")],
                    args.jobs, desc="trainings")
    by = {(r["dataset"], r["positions"], r["seed"], r["rule"]): r for r in runs}
    rows = []
    for data, n, seed in tasks:
        mode, _ = served_mode(data, n, seed, args.data_dir)
        pair = [by[(data, n, seed, "split")], by[(data, n, seed, "cross-fit")]]
        rows += pair + [{**by[(data, n, seed, mode)], "rule": "served"}]
    write_rows(RESULTS / "small_survey.csv", rows, COLUMNS, extra="ignore")
    lines = ["## Small surveys: split against cross-fit calibration at new positions of the same site", "",
             f"Command: `{command('small_survey', argv)}` at commit `{commit()}`. Per size and seed one survey "
             "trained twice, `--calibration split` and `--calibration cross-fit`; `served` is the one "
             "`--calibration auto` picks. Coverage at new positions of the same site (synthetic: 600 uniform "
             "over the floor; UJIIndoorLoc: the building's other positions), each position weighing the same; at "
             "grid positions: about 600 drawn as the survey drew its own (a fresh jitter of its grid: exchangeable "
             "with the surveyed positions, the guarantee's assumption, where uniform positions also reach the "
             "floor's margins beyond the outermost surveyed ones); "
             "area: the served method's mean region (m^2); efficiency: area / (pi centre_error^2); circle floor: "
             "that ratio for the smallest circle about the same centres holding 90 % of the new readings "
             "(known only with the answers); area / split's: the mean area over the split rule's on the same seeds, "
             "and in brackets the median of the per-seed ratios; area / bbox: against the "
             "surveyed positions' bounding box (the synthetic site is 40 x 25 m = 1,000 m^2). Plot: "
             "`benchmarks/results/small_survey.png`.", "",
             *summary(rows), "",
             "Survey-size guidance (`GET /model` `scale.survey_size`, a subsampling estimate) against the area "
             "measured at half and twice the positions, both under `--calibration cross-fit` (means over seeds; "
             "'-' where no such size ran):", "",
             *guidance(rows), ""]
    write_text(RESULTS / "small_survey.md", "\n".join(lines) + "\n")
    plot(rows, RESULTS / "small_survey.png")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
