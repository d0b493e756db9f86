"""What the ``gp`` centre's capped hyperparameter search costs in error, against its size: the grouped study of
``train_speed.py`` (``visits``: 28 subjects, about 3,000 rows, 19 features), where issue 69's cap
(``GPCentre.search_rows`` 800 -> 400) moved the centre choice on some splits.

    python -m benchmarks.gp_search                 # 10 seeds x 5 subject folds (about 10 minutes)
    python -m benchmarks.gp_search --seeds 0-1     # a part
    python -m benchmarks.gp_search --cached-only   # the summary again from gp_search.csv

Per seed the 28 subjects are shuffled into 5 folds (the centre selection's grouped folds); per fold a
:class:`~models.centres.gp.GPCentre` is fitted on the other four with each ``search_rows`` of :data:`ROWS`
(``max_iter`` at its default, the posterior conditioned on every training row up to ``max_rows``) and scored on
the held-out subjects: the RMSE of the two targets' Euclidean error, and the fit's seconds. The folds are
paired: the same rows, the same seed, only the search size differs.

Writes ``benchmarks/results/gp_search.{csv,md}``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time

import numpy as np

from benchmarks.common import RESULTS, command, commit, parse_seeds, write_rows, write_text
from benchmarks.harness.splits import visits_csv

OUT = RESULTS
ROWS = (400, 600, 800)
FOLDS = 5
TARGETS = ("measure_a", "measure_b")


def load():
    """The grouped study's standardised features, targets and subjects."""
    import pandas as pd

    df = pd.read_csv(visits_csv())
    X = df.drop(columns=[*TARGETS, "subject"]).to_numpy(float)
    X = (X - X.mean(0)) / X.std(0)
    return X, df[list(TARGETS)].to_numpy(float), df["subject"].to_numpy()


def run_seed(seed: int, X, Y, subject) -> list[dict]:
    """Every fold of one seed's subject shuffle, every search size."""
    from models.centres.gp import GPCentre

    units = np.random.default_rng(seed).permutation(np.unique(subject))
    fold_of = {u: i % FOLDS for i, u in enumerate(units)}
    fold = np.array([fold_of[s] for s in subject])
    rows = []
    for k in range(FOLDS):
        train, test = fold != k, fold == k
        for search_rows in ROWS:
            t = time.perf_counter()
            gp = GPCentre(search_rows=search_rows, seed=seed).fit(X[train], Y[train])
            seconds = time.perf_counter() - t
            err = np.linalg.norm(gp.predict(X[test]) - Y[test], axis=1)
            rows.append({"seed": seed, "fold": k, "search_rows": search_rows, "train_rows": int(train.sum()),
                         "rmse": float(np.sqrt(np.mean(err**2))), "iterations": gp.search_iterations_,
                         "seconds": seconds, "commit": commit()})
    return rows


def summarise(rows: list[dict], argv: list[str]) -> str:
    by = {(r["seed"], r["fold"], r["search_rows"]): r for r in rows}
    pairs = sorted({(r["seed"], r["fold"]) for r in rows})
    base = ROWS[0]
    out = ["## The gp centre's hyperparameter search size (issue 69)", "",
           f"Command: `{command('gp_search', argv)}` at commit {rows[0].get('commit') or commit()}; 2 cores. "
           f"The grouped study of `train_speed.py` (`visits`), {len({p[0] for p in pairs})} seeds x {FOLDS} subject "
           "folds; per fold `GPCentre(search_rows=...)` fitted on the other subjects and scored on the held-out "
           "ones (RMSE of the Euclidean error of the two targets). Paired: the same rows and seed per fold.", "",
           f"| search_rows | mean RMSE | RMSE / {base}'s (mean over folds) | folds better than {base} | "
           f"worst fold / its {base} | mean fit s | mean L-BFGS iterations |",
           "|---|---|---|---|---|---|---|"]
    for n in ROWS:
        mine = [by[p + (n,)] for p in pairs]
        ratio = [by[p + (n,)]["rmse"] / by[p + (base,)]["rmse"] for p in pairs]
        better = sum(by[p + (n,)]["rmse"] < by[p + (base,)]["rmse"] for p in pairs)
        out.append(f"| {n} | {np.mean([r['rmse'] for r in mine]):.3f} | {np.mean(ratio):.3f} | "
                   f"{better if n != base else '-'} of {len(pairs)} | {max(ratio):.3f} | "
                   f"{np.mean([r['seconds'] for r in mine]):.1f} | {np.mean([r['iterations'] for r in mine]):.0f} |")
    spread = [np.std([by[p + (n,)]["rmse"] for n in ROWS]) / np.mean([by[p + (n,)]["rmse"] for n in ROWS])
              for p in pairs]
    out += ["", f"Within a fold, the three search sizes' RMSE differ by {100 * np.mean(spread):.1f} % "
            "(coefficient of variation, mean over folds)."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--cached-only", action="store_true", help="summarise benchmarks/results/gp_search.csv again")
    args = p.parse_args(argv)
    if args.cached_only:
        with open(OUT / "gp_search.csv", newline="") as f:
            rows = [{k: (float(v) if k in ("rmse", "seconds") else v if k == "commit" else int(v)) for k, v in r.items()}
                    for r in csv.DictReader(f)]
        argv = ["--seeds", f"{min(r['seed'] for r in rows)}-{max(r['seed'] for r in rows)}"]
    else:
        X, Y, subject = load()
        rows = []
        for seed in parse_seeds(args.seeds):
            rows += run_seed(seed, X, Y, subject)
            print(f"seed {seed} done", flush=True)
        write_rows(OUT / "gp_search.csv", rows, list(rows[0]))
    write_text(OUT / "gp_search.md", summarise(rows, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
