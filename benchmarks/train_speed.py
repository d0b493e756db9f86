"""`lmve-train` as a user runs it, before and after issue 69: wall time and peak memory per stage, and the
served region paired on the same splits.

    python -m benchmarks.train_speed                          # everything (hours on 2 cores; resumes)
    python -m benchmarks.train_speed --scenarios enb --seeds 0-2 --variants after   # a part
    python -m benchmarks.train_speed --cached-only            # summarise what ran
    python -m benchmarks.train_speed --scenarios visits --variants after --rerun-after  # after a change

Each run is the real command, ``python -m training.commands.train`` in a child process, alone on the machine (the
``*_busy`` scenarios: beside one CPU-bound process, a Python busy loop started before the run and killed
after it), with the scenario's flags, ``--seed`` and ``--quiet``:

- ``after`` runs this checkout;
- ``before`` runs the code of :data:`BEFORE` (the commit issue 69 started from), checked out once by this script
  as a git worktree under ``benchmarks/cache/train_speed/before_src`` and run with this checkout's virtual
  environment. A scenario's ``cap`` stops a ``before`` run that would take longer (recorded as stopped, with
  its wall at the cap).

Scenarios (:data:`SCENARIOS`): UJIIndoorLoc's TrainingData as a user's CSV (the 520 WAP columns as features,
LONGITUDE, LATITUDE as targets; written once under ``benchmarks/cache/train_speed/``) with the defaults, with
``--calibrate-across PHONEID`` (every method), and the built-in data set ``--split-by BUILDINGID`` (one model per
building); the built-in enb, ble_rssi, residential_building and synthetic; ``visits``, a grouped study of 28
subjects, about 3,000 rows and 20 features (``training.data.synthetic.make_visits(28, 70, 145, extra_features=13)``,
``--groups subject``); and the synthetic default beside a busy process.

Per run the child's ``metrics.json`` (every model's, for ``--split-by``) gives each stage's seconds and peak
resident memory (``training.pipeline.meter``), the child's rusage its whole peak, and the bundle the served method, its
test coverage and mean volume, and how the served-method choice was made. Runs are cached as JSON under
``benchmarks/cache/train_speed/runs/`` (a rerun resumes).

Writes ``benchmarks/results/train_speed.csv`` (one row per run, or per model with ``--split-by``) and
``train_speed.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.common import (DATA_DIR, RESULTS, ROOT, cache_dir, command, commit, parse_seeds, write_csv, write_json,
                               write_rows, write_text)
from benchmarks.harness.child import run_child
from benchmarks.harness.splits import visits_csv

CACHE = cache_dir("train_speed")
OUT = RESULTS
#: the commit issue 69 started from: what ``before`` runs (``--before`` names another: a later issue's baseline)
BEFORE = "5027930"
#: what ``before`` is, in the summary's words
BEFORE_WHAT = "where issue 69 started"
#: the results' file stem (``--before``: ``variants/train_speed/before_<commit>``)
STEM = "train_speed"
VARIANTS = ("before", "after")
#: scenario -> source, extra flags, paired splits wanted (seeds 0, 1, ... until that many ran in both variants;
#: a seed lmve-train refuses, e.g. too few calibration groups for the level, is recorded and skipped), the
#: budget (seconds, mean over the splits; None: none: the latest an issue set, 99 for UJIIndoorLoc, 69 elsewhere), ``cap``: the most a ``before`` run may take,
#: ``before_splits``: on how many of the splits ``before`` runs (one where it only ever stops at the cap)
SCENARIOS = {
    "uji": {"source": "uji", "flags": [], "splits": 3, "budget": 120},
    "uji_across": {"source": "uji_phone", "flags": ["--calibrate-across", "PHONEID"], "splits": 3, "budget": 240,
                   "cap": 1800, "before_splits": 1},
    "uji_buildings": {"source": ["--dataset", "indoor_localization"], "flags": ["--split-by", "BUILDINGID"],
                      "splits": 1, "budget": None, "cap": 1800},
    "enb": {"source": ["--dataset", "enb"], "flags": [], "splits": 10, "budget": None},
    "ble_rssi": {"source": ["--dataset", "ble_rssi"], "flags": [], "splits": 10, "budget": None},
    "residential_building": {"source": ["--dataset", "residential_building"], "flags": [], "splits": 10,
                             "budget": None},
    "synthetic": {"source": ["--dataset", "synthetic"], "flags": [], "splits": 10, "budget": 30},
    "visits": {"source": "visits", "flags": ["--groups", "subject"], "splits": 10, "budget": 60},
    "synthetic_busy": {"source": ["--dataset", "synthetic"], "flags": [], "splits": 3, "budget": None, "busy": True,
                       "variants": ("after",)},
}
SERVED = ("lmve", "nle", "ge")  # without a recorded selection: the first the run has (the registry's order)
CSV_COLUMNS = ["scenario", "variant", "seed", "model", "wall_s", "peak_mib", "stopped", "centre", "served",
               "coverage", "volume", "folds_run", "stages_json", "commit"]


# ----------------------------------------------------------------------------------------- the inputs
def uji_csv(data_dir: Path, name: str = "uji") -> Path:
    """UJIIndoorLoc's TrainingData as a user's CSV: WAP001..WAP520, LONGITUDE, LATITUDE (``uji``), and PHONEID
    (``uji_phone``)."""
    path = CACHE / f"{name}.csv"
    if not path.is_file():
        import pandas as pd

        df = pd.read_csv(data_dir / "indoor_localization" / "TrainingData.csv.gz")
        cols = [c for c in df.columns if c.startswith("WAP")] + ["LONGITUDE", "LATITUDE"]
        cols += ["PHONEID"] if name == "uji_phone" else []
        write_csv(df[cols], path)
    return path


def source(scenario: str, data_dir: Path) -> list[str]:
    """The scenario's data flags."""
    src = SCENARIOS[scenario]["source"]
    if src in ("uji", "uji_phone"):
        return ["--csv", str(uji_csv(data_dir, src)), "--targets", "LONGITUDE,LATITUDE"]
    if src == "visits":
        return ["--csv", str(visits_csv()), "--targets", "measure_a,measure_b"]
    return [*src, "--data-dir", str(data_dir)]


def code_dir(variant: str) -> Path:
    """Where a variant's code is: this checkout, or the :data:`BEFORE` worktree (checked out on first use)."""
    if variant == "after":
        return ROOT
    path = CACHE / "before_src"
    if not (path / "training").is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), BEFORE], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    return path


# ----------------------------------------------------------------------------------------- one run
def train_module(code: Path) -> str:
    """The module ``lmve-train`` runs as in the checkout at ``code``: ``training.commands.train``, or the flat
    ``training.cli`` of commits before training/ had sub-packages."""
    return "training.commands.train" if (code / "training" / "commands" / "train.py").is_file() else "training.cli"


def run_one(scenario: str, variant: str, seed: int, data_dir: Path, rerun_after: bool = False) -> dict:
    """One ``lmve-train`` run in a child process; its figures (cached). ``rerun_after``: an ``after`` run
    cached at another commit moves to ``runs_<its commit>/`` and runs again."""
    cached = CACHE / "runs" / f"{scenario}_{variant}_{seed}.json"
    if cached.is_file():
        row = json.loads(cached.read_text())
        if not (rerun_after and variant == "after" and row.get("commit") != commit()):
            return row
        aside = CACHE / f"runs_{str(row.get('commit'))[:7]}"
        aside.mkdir(parents=True, exist_ok=True)
        cached.replace(aside / cached.name)
    spec = SCENARIOS[scenario]
    out = CACHE / "out" / f"{scenario}_{variant}_{seed}"
    cwd = code_dir(variant)
    cmd = [sys.executable, "-m", train_module(cwd), *source(scenario, data_dir), *spec["flags"], "--seed", str(seed),
           "--quiet", "--out", str(out)]
    cap = spec.get("cap") if variant == "before" else None
    log = CACHE / "out" / f"{scenario}_{variant}_{seed}.log"
    child = run_child(cmd, log, cwd=cwd, cap=cap, busy=bool(spec.get("busy")))
    wall, code, stopped = child.wall_s, child.code, child.stopped
    text = log.read_text()
    row = {"scenario": scenario, "variant": variant, "seed": seed, "commit": commit() if variant == "after"
           else BEFORE, "command": " ".join(cmd[1:])}
    if stopped:
        row.update(stopped=True, wall_s=round(wall, 1), note=f"stopped at the cap of {cap} s")
    elif code == 2 and "lmve-train: error:" in text:  # refused with a message
        row["refused"] = text.split("lmve-train: error:")[1].strip()
    elif code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{text[-3000:]}")
    else:
        row.update(wall_s=round(wall, 2), stopped=False, models=_models(out, scenario))
        # the stages' peaks too: resetting the high-water mark per stage lowers what rusage reports at exit
        peaks = [s["peak_rss_mib"] for m in row["models"].values() for s in m["stages"].values()]
        row["peak_mib"] = round(max([*peaks, child.peak_mib]), 1)
    write_json(cached, row, indent=1)
    return row


def _places(out: Path, scenario: str) -> dict[str, tuple[Path, Path]]:
    """Per model of a run (``"-"`` for a single bundle): its report folder and its bundle."""
    if "--split-by" in SCENARIOS[scenario]["flags"]:
        repo = json.loads((out / "repository.json").read_text())
        return {name: (out / "reports" / name, out / name) for name in repo["models"]}
    return {"-": (out, out / "bundle")}


def _test_volumes(out: Path, scenario: str) -> dict[str, dict[str, float]]:
    """Per model, the test part's mean volume of each method that can be served (:data:`SERVED`)."""
    volumes = {}
    for name, (report, _) in _places(out, scenario).items():
        metrics = json.loads((report / "metrics.json").read_text())["metrics"]
        volumes[name] = {m: metrics[m]["volume"] for m in SERVED if m in metrics}
    return volumes


def _models(out: Path, scenario: str) -> dict[str, dict]:
    """Per model of a run (``"-"`` for a single bundle): stages, centre, the served method and its figures
    (``methods``: every servable method's test volume)."""
    places = _places(out, scenario)
    tests = _test_volumes(out, scenario)
    models = {}
    for name, (report, bundle) in places.items():
        metrics = json.loads((report / "metrics.json").read_text())
        manifest = json.loads((bundle / "manifest.json").read_text())
        selection = manifest.get("selection") or {}
        served = selection.get("primary") or next(m for m in SERVED if m in metrics["metrics"])
        centre = manifest["training"]["centre"]
        models[name] = {"stages": metrics["stages"], "centre": centre["name"],
                        "candidates": {n: {k: r.get(k) for k in ("status", "rows", "folds", "rmse", "seconds")}
                                       for n, r in centre.get("cv", {}).items()},
                        "served": served, "coverage": metrics["metrics"][served]["coverage"],
                        "volume": metrics["metrics"][served]["volume"],
                        "folds_run": selection.get("folds_run", selection.get("folds")),
                        "evidence": (selection.get("evidence") or {}).get("checks"), "methods": tests[name]}
    return models


def _smallest(row: dict, name: str) -> bool | None:
    """Whether model ``name`` of a run served the smallest of its servable methods on the test part (runs
    cached before ``methods`` was recorded read it from their output folder; ``None`` where it is gone)."""
    methods = row["models"][name].get("methods")
    if methods is None:
        out = CACHE / "out" / f"{row['scenario']}_{row['variant']}_{row['seed']}"
        try:
            methods = _test_volumes(out, row["scenario"])[name]
        except (OSError, KeyError, ValueError):
            return None
    return row["models"][name]["served"] == min(methods, key=methods.get)


# ----------------------------------------------------------------------------------------- the summary
def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _after_commits(rows: list[dict]) -> str:
    """Which commits the cached ``after`` runs ran at: "this commit" when all of them did, else each commit
    with its scenarios."""
    by = {}
    for r in _done(rows, "after"):
        by.setdefault(r["commit"], set()).add(r["scenario"])
    if set(by) <= {commit()}:
        return "this commit"
    return "; ".join(f"{c[:7]} ({', '.join(sorted(s, key=list(SCENARIOS).index))})" for c, s in by.items())


def summarise(rows: list[dict], argv: list[str]) -> str:
    lines = [f"## `lmve-train` before ({BEFORE}, {BEFORE_WHAT}) and after", "",
             f"Command: `{command('train_speed', argv)}` at commit {commit()}; 2 cores; each run "
             f"a child process alone on the machine (`synthetic_busy`: beside one CPU-bound process). `before`: commit "
             f"{BEFORE} ({BEFORE_WHAT}), `after`: {_after_commits(rows)}; the same command and seed. Seconds and peak "
             "resident memory per stage from each run's `metrics.json` (means over the seeds, summed over the models "
             "of `--split-by`); `wall` is the whole command (imports included), `peak` the child's peak resident "
             "set. Volume: the mean true area of the served method's test regions.", ""]
    lines += _budgets(rows) + [""]
    for scenario, spec in SCENARIOS.items():
        mine = [r for r in rows if r["scenario"] == scenario]
        if not mine:
            continue
        lines += [f"### {scenario}", "", f"`lmve-train {_flags(mine[0])}`", ""]
        lines += _stage_table(mine) + [""]
        lines += _paired(mine) + [""]
    return "\n".join(lines)


def _flags(row: dict) -> str:
    """The run's flags as a user would type them: files by name, without ``--out``, ``--data-dir`` and ``--seed``."""
    words, out = row["command"].split()[2:], []  # past "-m training.commands.train"
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in ("--out", "--data-dir", "--seed"):
            skip = True
        else:
            out.append(Path(w).name if "/" in w else w)
    return " ".join(out)


def _done(rows, variant=None):
    return [r for r in rows if "models" in r and (variant is None or r["variant"] == variant)]


def _budgets(rows: list[dict]) -> list[str]:
    out = ["| scenario | budget s | before wall s | after wall s | after / before | after peak MiB | splits |",
           "|---|---|---|---|---|---|---|"]
    for scenario, spec in SCENARIOS.items():
        mine = [r for r in rows if r["scenario"] == scenario]
        if not mine:
            continue
        before = [r for r in mine if r["variant"] == "before" and ("models" in r or r.get("stopped"))]
        after = _done(mine, "after")
        b, a = mean(r["wall_s"] for r in before), mean(r["wall_s"] for r in after)
        stopped = " (stopped at the cap)" if any(r.get("stopped") for r in before) else ""
        out.append(f"| {scenario} | {spec['budget'] or '-'} | {_num(b)}{'+' if stopped else ''}{stopped} | "
                   f"{_num(a)} | {_num(a / b) if before and after else '-'} | "
                   f"{_num(max((r['peak_mib'] for r in after), default=float('nan')), 0)} | {len(after)} |")
    busy = _done([r for r in rows if r["scenario"] == "synthetic_busy"], "after")
    alone = _done([r for r in rows if r["scenario"] == "synthetic"], "after")
    if busy and alone:
        seeds = sorted({r["seed"] for r in busy} & {r["seed"] for r in alone})
        ratio = mean(next(r["wall_s"] for r in busy if r["seed"] == s) / next(r["wall_s"] for r in alone if r["seed"] == s)
                     for s in seeds)
        out += ["", f"The synthetic default beside one CPU-bound process took **{ratio:.2f}x** its time alone "
                    f"(seeds {', '.join(map(str, seeds))}, the same seeds alone in `synthetic`)."]
    return out


def _num(v, digits=1) -> str:
    return "-" if v != v else f"{v:.{digits}f}"


def _stage_table(mine: list[dict]) -> list[str]:
    variants = [v for v in VARIANTS if _done(mine, v)]
    stages = list(dict.fromkeys(s for r in _done(mine) for m in r["models"].values() for s in m["stages"]))
    out = ["| stage | " + " | ".join(f"{v} s | {v} peak MiB" for v in variants) + " |",
           "|---|" + "---|" * (2 * len(variants))]
    for s in stages:
        cells = []
        for v in variants:
            runs = _done(mine, v)
            per = [sum(m["stages"][s]["seconds"] for m in r["models"].values() if s in m["stages"]) for r in runs]
            peak = [m["stages"][s]["peak_rss_mib"] for r in runs for m in r["models"].values() if s in m["stages"]]
            cells += [f"{mean(per):.1f}", f"{max(peak):.0f}" if peak else "-"]
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    cells = []
    for v in variants:
        runs = _done(mine, v)
        cells += [f"**{mean(r['wall_s'] for r in runs):.1f}**", f"**{max(r['peak_mib'] for r in runs):.0f}**"]
    return out + ["| **wall (whole command)** | " + " | ".join(cells) + " |"]


def _paired(mine: list[dict]) -> list[str]:
    by = {v: {r["seed"]: r for r in _done(mine, v)} for v in VARIANTS}
    refused = sorted({r["seed"]: r["refused"] for r in mine if "refused" in r}.items())
    stopped = sorted(r["seed"] for r in mine if r.get("stopped"))
    out = []
    paired = sorted(set(by["before"]) & set(by["after"]))
    if paired:
        out += ["| seed | model | centre before / after | served before / after | coverage before / after | "
                "volume before | volume after | after / before | folds run after | wall before / after s |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        ratios, same, n, hits = [], 0, 0, {v: [] for v in VARIANTS}
        for s in paired:
            b, a = by["before"][s], by["after"][s]
            for name in a["models"]:
                if name not in b["models"]:
                    continue
                mb, ma = b["models"][name], a["models"][name]
                ratios.append(ma["volume"] / mb["volume"])
                same += mb["served"] == ma["served"]
                n += 1
                for v, r in (("before", b), ("after", a)):
                    hits[v].append(_smallest(r, name))
                out.append(f"| {s} | {name} | {mb['centre']} / {ma['centre']} | {mb['served']} / {ma['served']} | "
                           f"{100 * mb['coverage']:.1f} / {100 * ma['coverage']:.1f} % | {mb['volume']:.4g} | "
                           f"{ma['volume']:.4g} | {ratios[-1]:.4f} | {ma['folds_run']} | {b['wall_s']:.0f} / "
                           f"{a['wall_s']:.0f} |")
        cov = {v: mean(m["coverage"] for s in paired for m in by[v][s]["models"].values()) for v in VARIANTS}
        out += ["", f"Paired on {len(paired)} splits ({n} models): mean volume after / before **{mean(ratios):.4f}** "
                    f"(min {min(ratios):.4f}, max {max(ratios):.4f}); coverage {100 * cov['before']:.2f} % before, "
                    f"{100 * cov['after']:.2f} % after; the same served method on {same} of {n}" +
                    ("" if None in hits["before"] + hits["after"] else
                     f"; the served method was the smallest of {', '.join(SERVED)} on the test part on "
                     f"{sum(hits['before'])} of {n} before and {sum(hits['after'])} after") + "."]
    elif by["after"]:
        out += ["| seed | model | centre | served | coverage | volume | folds run | wall s |", "|---|---|---|---|---|---|---|---|"]
        for s, r in sorted(by["after"].items()):
            for name, m in r["models"].items():
                out.append(f"| {s} | {name} | {m['centre']} | {m['served']} | {100 * m['coverage']:.1f} % | "
                           f"{m['volume']:.4g} | {m['folds_run']} | {r['wall_s']:.0f} |")
    for seed, why in refused:
        out += ["", f"Seed {seed}: refused by `lmve-train`: {why}"]
    for seed in stopped:
        out += ["", f"Seed {seed}, before: stopped at the cap ({next(r['wall_s'] for r in mine if r['seed'] == seed and r.get('stopped')):.0f} s)."]
    return out


def recorded(path: Path, have: set) -> list[dict]:
    """The runs of the results CSV at ``path`` that the cache lacks (``have``: its (scenario, variant, seed)), as
    :func:`run_one`'s rows: a rerun of some scenarios keeps the others' figures (each row keeps its commit);
    their ``command`` rebuilt from the scenario's flags, files by name."""
    import pandas as pd

    if not path.is_file():
        return []
    df = pd.read_csv(path, dtype={"commit": str})
    out = []
    for (scenario, variant, seed), runs in df.groupby(["scenario", "variant", "seed"], sort=False):
        if scenario not in SCENARIOS or (scenario, variant, int(seed)) in have:
            continue
        first = runs.iloc[0]
        src = SCENARIOS[scenario]["source"]
        words = ["--csv", f"{src}.csv", "--targets", "LONGITUDE,LATITUDE"] if src in ("uji", "uji_phone") else \
            ["--csv", "visits.csv", "--targets", "measure_a,measure_b"] if src == "visits" else list(src)
        row = {"scenario": scenario, "variant": variant, "seed": int(seed), "commit": str(first["commit"]),
               "command": " ".join(["-m", "training.commands.train", *words, *SCENARIOS[scenario]["flags"],
                                    "--seed", str(int(seed)), "--quiet"]), "wall_s": float(first["wall_s"])}
        if str(first["stopped"]) == "True":
            row["stopped"] = True
        else:
            row.update(stopped=False, peak_mib=float(first["peak_mib"]), models={
                str(m["model"]): {"centre": m["centre"], "served": m["served"], "coverage": float(m["coverage"]),
                                  "volume": float(m["volume"]), "folds_run": int(m["folds_run"]),
                                  "stages": json.loads(m["stages_json"])} for _, m in runs.iterrows()})
        out.append(row)
    return out


def csv_rows(rows: list[dict]):
    for r in rows:
        if r.get("stopped"):
            yield {"scenario": r["scenario"], "variant": r["variant"], "seed": r["seed"], "wall_s": r["wall_s"],
                   "stopped": True, "commit": r["commit"]}
        for name, m in r.get("models", {}).items():
            yield {"scenario": r["scenario"], "variant": r["variant"], "seed": r["seed"], "model": name,
                   "wall_s": r["wall_s"], "peak_mib": r["peak_mib"], "stopped": False, "centre": m["centre"],
                   "served": m["served"], "coverage": m["coverage"], "volume": m["volume"],
                   "folds_run": m["folds_run"], "stages_json": json.dumps(m["stages"]), "commit": r["commit"]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: all)")
    p.add_argument("--seeds", default=None, help="e.g. 0-9 or 0,3 (default: from 0 until the scenario's paired "
                                                 "splits ran)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--cached-only", action="store_true", help="summarise the cached runs only")
    p.add_argument("--rerun-after", action="store_true", help="rerun the after runs cached at another commit "
                                                              "(the old ones move to runs_<commit>/)")
    p.add_argument("--before", default=None, metavar="COMMIT",
                   help="the commit `before` runs instead (a later issue's baseline; every seed asked runs in both "
                        "variants); its runs are cached under benchmarks/cache/train_speed/before_<COMMIT>/ and written "
                        "to results/variants/train_speed/before_<COMMIT>.{csv,md}")
    p.add_argument("--before-what", default=None, help="with --before: what it is, for the summary")
    args = p.parse_args(argv)
    if args.before:
        global BEFORE, BEFORE_WHAT, CACHE, STEM
        BEFORE, STEM = args.before, f"variants/train_speed/before_{args.before}"
        BEFORE_WHAT = args.before_what or "the baseline named by --before"
        CACHE = CACHE / f"before_{args.before}"
        for spec in SCENARIOS.values():
            spec.pop("before_splits", None)
            spec.pop("cap", None)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for s in scenarios:
        if s not in SCENARIOS:
            p.error(f"--scenarios: unknown scenario {s!r}; choose from {', '.join(SCENARIOS)}")
    if not args.cached_only:
        for scenario in scenarios:
            spec = SCENARIOS[scenario]
            variants = [v.strip() for v in args.variants.split(",") if v.strip() in spec.get("variants", VARIANTS)]
            seeds = parse_seeds(args.seeds) if args.seeds else range(3 * spec["splits"])
            done = 0
            for seed in seeds:
                if not args.seeds and done == spec["splits"]:
                    break
                runs = [run_one(scenario, v, seed, args.data_dir, args.rerun_after) for v in variants
                        if v != "before" or done < spec.get("before_splits", spec["splits"])]
                for r in runs:
                    what = (f"refused: {r['refused']}" if "refused" in r else f"stopped at {r['wall_s']:.0f} s"
                            if r.get("stopped") else f"{r['wall_s']:.0f} s, {r['peak_mib']:.0f} MiB, " +
                            ", ".join(f"{m['centre']} -> {m['served']} {m['volume']:.4g}" for m in r["models"].values()))
                    print(f"{scenario} {r['variant']} seed {seed}: {what}", flush=True)
                done += all("refused" not in r for r in runs)
    rows = [json.loads(f.read_text()) for f in sorted((CACHE / "runs").glob("*.json"))]
    rows = [r for r in rows if r.get("scenario") in SCENARIOS]
    rows += recorded(OUT / f"{STEM}.csv", {(r["scenario"], r["variant"], r["seed"]) for r in rows})
    rows.sort(key=lambda r: (list(SCENARIOS).index(r["scenario"]), r["seed"], VARIANTS.index(r["variant"])))
    write_rows(OUT / f"{STEM}.csv", csv_rows(rows), CSV_COLUMNS)
    write_text(OUT / f"{STEM}.md", summarise(rows, argv))
    print(f"wrote {OUT / f'{STEM}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
