"""Few groups: a study of 35 subjects trained at 90 %, its coverage at new subjects over many splits.

    python -m benchmarks.groups_few [--seeds 0-99] [--subjects 35] [--modes split,auto] [--jobs 2]
    python -m benchmarks.groups_few --subjects 42 --heterogeneity 2   # subjects far apart: variants/groups_few/h2.md

Per seed ``s``: a new study (``training.data.synthetic.make_visits(subjects, seed=s, heterogeneity=h)``: 4 to 12
visits per subject, the subject effects' spread ``1 + h |z|``, default 0.5),
``lmve-train``'s default run on it grouped by subject (``--dataset visits``: ``--centre auto``, group-subsample
calibration, GE, NLE and LMVE) under each ``--calibration`` mode named: ``split``, whose default fractions leave
3 or 4 calibration subjects, so whole subjects move into calibration until 9 attain 0.9, and ``auto`` (the
default), which cross-fits a study this small (every training subject scored out of fold). Coverage at new groups is measured on 1,000 fresh subjects of the
same population (``make_visits(1000, seed=10_000 + s)``) as a new subject, then a random visit of it would
meet it: each subject's share of covered visits, averaged over subjects; also on the run's own test part.

Writes ``benchmarks/results/groups_few.md`` (``variants/groups_few/h<h>.md`` at another heterogeneity); runs cached as JSON
under ``benchmarks/cache/groups_few/n<subjects>[_h<h>]/<mode>/``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks.common import (RESULTS, cache_dir, command, commit, parallel, parse_seeds, variant_dir, write_json,
                               write_text)


CACHE = cache_dir("groups_few")
OUT = RESULTS
METHODS = ("ge", "nle", "lmve")
#: make_visits' own heterogeneity (the subject effects' spread 1 + h |z|)
DEFAULT_H = 0.5


def _tag(heterogeneity: float) -> str:
    """The cache folder's and the page's suffix: none at the default heterogeneity."""
    return "" if heterogeneity == DEFAULT_H else f"_h{heterogeneity:g}"


def per_group(inside: np.ndarray, groups: np.ndarray) -> float:
    """The mean over groups of each group's covered share (a random new group, then a random row of it)."""
    _, codes = np.unique(groups, return_inverse=True)
    return float(np.mean(np.bincount(codes, weights=inside) / np.bincount(codes)))


def run_one(seed: int, subjects: int, mode: str, heterogeneity: float = DEFAULT_H) -> dict:
    path = CACHE / f"n{subjects}{_tag(heterogeneity)}" / mode / f"seed_{seed:03d}.json"
    if path.is_file():
        return json.loads(path.read_text())
    from training.calibration.cross_fit import resolve_mode
    from training.data.datasets import Dataset, with_groups
    from training.pipeline import TrainConfig, train
    from training.data.synthetic import make_visits

    X, Y, subject, fn, tn = make_visits(subjects, seed=seed, heterogeneity=heterogeneity)
    ds = with_groups(Dataset("visits", X, Y, fn, tn, "-", meta={"subject": subject}), {"subject": subject}, "subject")
    config = TrainConfig(seed=seed, methods=METHODS, centre="auto", calibration_mode=mode)
    result = train(ds, config)
    Xn, Yn, sn, _, _ = make_visits(1000, seed=10_000 + seed, heterogeneity=heterogeneity)
    new = {}
    for m in METHODS:
        regions = result.model.predict_region(Xn, method=m).regions
        new[m] = {"coverage": per_group(regions.contains(Yn), sn), "volume": float(regions.volume().mean())}
    test = result.split.test
    served = result.model.selection["primary"]
    record = {"seed": seed, "subjects": subjects, "mode": mode, "resolved": resolve_mode(ds, config)[0],
              "served": served, "adjustment": result.split.adjustment,
              "n_calibration": next(iter(result.model.methods.values())).calibrator_.n_calibration_,
              "new_subjects": new,
              "test": {m: per_group(result.model.predict_region(ds.X[test], method=m).regions.contains(ds.Y[test]),
                                    subject[test]) for m in METHODS}}
    write_json(path, record)
    return record


def table(runs: list[dict]) -> list[str]:
    """The markdown table of one mode's runs: each method's coverage at new subjects, its spread and area."""
    lines = ["| method | coverage at new subjects (mean over splits) | sd over splits | splits below 90 % | "
             "mean area | coverage on the run's test subjects | served by auto |", "|---|---|---|---|---|---|---|"]
    for m in METHODS:
        cov = np.array([r["new_subjects"][m]["coverage"] for r in runs])
        lines.append(f"| {m} | {100 * cov.mean():.1f} % | {100 * cov.std(ddof=1):.1f} | {int((cov < 0.9).sum())} | "
                     f"{np.mean([r['new_subjects'][m]['volume'] for r in runs]):.4g} | "
                     f"{100 * np.mean([r['test'][m] for r in runs]):.1f} % | "
                     f"{sum(r['served'] == m for r in runs)} |")
    served = np.array([r["new_subjects"][r["served"]]["coverage"] for r in runs])
    lines.append(f"| auto (served) | {100 * served.mean():.1f} % | {100 * served.std(ddof=1):.1f} | "
                 f"{int((served < 0.9).sum())} | {np.mean([r['new_subjects'][r['served']]['volume'] for r in runs]):.4g}"
                 f" | | {len(runs)} |")
    return lines


def describe(mode: str, runs: list[dict]) -> str:
    """What the mode did on these studies, in one paragraph."""
    resolved = sorted({r["resolved"] for r in runs})
    if resolved == ["cross-fit"]:
        return (f"`--calibration {mode}` cross-fitted every study: each training subject scored by a centre and "
                f"shapes fitted without it, {sorted({r['n_calibration'] for r in runs})} subjects calibrating, the "
                "served model fitted on all of them (rule group-pooled; the guarantee is approximate, its bound "
                "1 - 2(1 - 0.9) = 80 %).")
    moved = [r["adjustment"]["moved_from_train"] + r["adjustment"]["moved_from_test"] for r in runs if r["adjustment"]]
    before = [r["adjustment"]["groups_before"]["calibration"] for r in runs if r["adjustment"]]
    return (f"`--calibration {mode}` ({', '.join(resolved)}): the default fractions left {min(before, default=0)} to "
            f"{max(before, default=0)} calibration subjects on {len(moved)} of {len(runs)} splits; lmve-train moved "
            f"{min(moved, default=0)} to {max(moved, default=0)} whole subjects into calibration, which then held "
            f"{sorted({r['n_calibration'] for r in runs})} subjects (group-subsample rule, exact: with 9 calibration "
            "subjects the expected coverage is exactly 9/10).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-99", help="split seeds, e.g. 0-99")
    p.add_argument("--subjects", type=int, default=35, help="subjects per study")
    p.add_argument("--modes", default="split,auto", help="--calibration modes to compare, comma-separated")
    p.add_argument("--jobs", type=int, default=2, help="parallel training runs")
    p.add_argument("--heterogeneity", type=float, default=DEFAULT_H,
                   help="the subject effects' spread 1 + h |z| (default 0.5; 0: subjects alike)")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    seeds = parse_seeds(args.seeds)
    h = args.heterogeneity
    lines = [f"## Few groups: {args.subjects} subjects at 90 %" + (f", heterogeneity {h:g}" if _tag(h) else ""), "",
             f"Command: `{command('groups_few', argv)}` at commit `{commit()}`. {len(seeds)} splits per mode, each "
             f"a new study of {args.subjects} subjects (4 to 12 visits; subject effects' spread 1 + {h:g} |z|). "
             "Coverage at new subjects: over 1,000 fresh "
             "subjects per split, each subject's covered share of visits, averaged (a new subject, then a visit).",
             ""]
    for mode in modes:
        runs = parallel(run_one, [(s, args.subjects, mode, h) for s in seeds], args.jobs, desc=f"splits ({mode})")
        lines += [f"### --calibration {mode}", "", describe(mode, runs), ""] + table(runs) + [""]
    write_text(variant_dir(OUT, "groups_few", f"h{h:g}.md") if _tag(h) else OUT / "groups_few.md", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
