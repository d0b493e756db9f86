"""The benchmark's tables and plot: one row per split and method (:func:`runs_table`), Table I beside the
paper's (:func:`table1`, :func:`markdown_table`), the centre table, the reference rule against the exact one,
and the volumes' box plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.common import write_csv, write_text
from benchmarks.harness.peer import PEER
from benchmarks.harness.variants import PAPER_TABLE1, PAPER_UNIT_FACTOR

TABLE1_COLUMNS = ["dataset", "method", "n_splits", "coverage_mean", "coverage_std", "volume_mean", "volume_std",
                  "paper_volume", "fit_seconds_mean"]


def runs_table(records: list[dict]):
    """One row per (variant, dataset, seed, method)."""
    import pandas as pd

    rows = []
    for r in records:
        t = r["task"]
        for method, m in r["metrics"].items():
            rows.append({"variant": t["variant"], "dataset": t["dataset"], "seed": t["seed"], "method": method,
                         "coverage": m["coverage"], "volume_paper": m["volume_paper"], "volume": m["volume"],
                         "alpha_q": m["alpha_q"], "fit_seconds": m["fit_seconds"],
                         "centre_seconds": r["timings"].get("centre"), "wall_seconds": r["wall_seconds"],
                         "centre": (r.get("centre") or {}).get("name"),
                         "centre_rmse": ((r.get("centre") or {}).get("test") or {}).get("rmse"),
                         # records from before the field: the regions' centre was the shared one
                         "region_centre_rmse": m.get("centre_rmse",
                                                     ((r.get("centre") or {}).get("test") or {}).get("rmse")),
                         "oracle_volume": r.get("oracle_volume"),
                         # the reference-quantile variant: the same fits with the exact rule
                         "coverage_exact": r.get("metrics_exact", {}).get(method, {}).get("coverage"),
                         "volume_paper_exact": r.get("metrics_exact", {}).get(method, {}).get("volume_paper"),
                         "lmve_init_steps": r.get("lmve", {}).get("history", {}).get("init", {}).get("steps")
                         if method == "lmve" else None,
                         "lmve_train_steps": r.get("lmve", {}).get("history", {}).get("train", {}).get("steps")
                         if method == "lmve" else None})
    return pd.DataFrame(rows)


def table1(runs) -> "pd.DataFrame":  # noqa: F821
    """Aggregate per dataset and method (coverage as a fraction; volume in the paper convention)."""
    g = runs.groupby(["dataset", "method"], sort=False)
    out = g.agg(n_splits=("seed", "nunique"), coverage_mean=("coverage", "mean"), coverage_std=("coverage", "std"),
                volume_mean=("volume_paper", "mean"), volume_std=("volume_paper", "std"),
                fit_seconds_mean=("fit_seconds", "mean")).reset_index()
    out["paper_volume"] = [PAPER_TABLE1.get(d, {}).get(m, (None, None))[1] for d, m in zip(out.dataset, out.method)]
    return out[TABLE1_COLUMNS]


#: what the centre column says for the peer
PEER_CENTRE = "its own network"


def _peer_ratios(runs) -> dict:
    """``(dataset, method) -> mean over splits of volume / the peer's volume on the same split``."""
    peer = runs.loc[runs.method == PEER, ["dataset", "seed", "volume_paper"]].rename(columns={"volume_paper": "peer"})
    paired = runs.merge(peer, on=["dataset", "seed"])
    return (paired.volume_paper / paired.peer).groupby([paired.dataset, paired.method], sort=False).mean().to_dict()


def centre_tables(runs, t1, out: Path, command: str, wall: float) -> None:
    """``centre.{csv,md}``: Table I's columns plus the centre chosen (how often each candidate won)
    and its mean test RMSE (Euclidean, in the loader's target units)."""
    chosen = runs.groupby("dataset").apply(
        lambda g: ", ".join(f"{name} {n}/{g.seed.nunique()}" for name, n in
                            g.drop_duplicates("seed").centre.value_counts().items()), include_groups=False)
    rmse = runs.drop_duplicates(["dataset", "seed"]).groupby("dataset").centre_rmse.mean()
    own = runs.groupby(["dataset", "method"]).region_centre_rmse.mean()
    table = t1.copy()
    table["centre"] = [PEER_CENTRE if m == PEER else c for m, c in zip(table.method, table.dataset.map(chosen))]
    table["centre_rmse_mean"] = [own.get((d, m), np.nan) if m == PEER else r
                                 for d, m, r in zip(table.dataset, table.method, table.dataset.map(rmse))]
    table["region_centre_rmse_mean"] = [own.get((d, m), np.nan) for d, m in zip(table.dataset, table.method)]
    write_csv(table, out / "centre.csv")
    lines = ["## The centre chosen by `--centre auto`, every method on it", "",
             f"Command: `{command}`; this invocation's wall time {wall:.0f} s (cached splits are not re-run). "
             "The paper's split per seed; the centre is chosen per split by 5-fold cross-validation on the train "
             "part among the candidates (`auto-centre`: the paper SVR, the scaled SVR, kNN, boosted trees and their "
             "blend `stack`, i.e. `--centre-candidates paper,scaled,knn,hgb,stack`; "
             "`auto-centre-mlp`: and the MLP) after the RSSI step where the columns look like RSSI; `centre` says "
             "how often each won. Volume: det(alpha C)^1/2 in the loader's units "
             "(paper convention); centre RMSE: Euclidean, same units, of the shared centre; `region centre RMSE`: "
             f"of the regions' own centres (LMVE's corrected one with a mean head; `{PEER}` is MAPIE 1.6's "
             "multivariate standardised-residual score with its own network for mean and covariance, on the same "
             "splits and features, region read off its covariance and conformal threshold). `vs peer`: volume over "
             "the peer's on the same splits (mean of the per-split ratios).", "",
             "| dataset | method | splits | coverage % | volume | vs peer | centre | centre RMSE | region centre RMSE |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratio = _peer_ratios(runs)
    for _, r in table.iterrows():
        vs = ratio.get((r.dataset, r.method))
        lines.append(f"| {r.dataset} | {r.method} | {r.n_splits} | {100 * r.coverage_mean:.1f} "
                     f"({100 * (r.coverage_std if r.coverage_std == r.coverage_std else 0):.1f}) | "
                     f"{r.volume_mean:.4g} ({r.volume_std:.3g}) | {'-' if vs is None else f'{vs:.2f}'} | {r.centre} | "
                     f"{r.centre_rmse_mean:.4g} | {r.region_centre_rmse_mean:.4g} |")
    write_text(out / "centre.md", "\n".join(lines) + "\n")


def reference_pairs(runs) -> str:
    """Markdown: the reference-quantile rule against the exact one on the same fits, per dataset and method
    (mean over splits of the volume ratio, coverage of each), and the share of the gap to the paper's Table I
    it explains: ``(exact - reference) / (exact - paper)`` in the paper's units."""
    lines = ["", "### The reference rule against the exact one, paired", "",
             "The same fits per split, calibrated twice: the exact split-conformal threshold (the "
             "`ceil((n + 1) eta)`-th calibration score; what the bundles serve) and the paper's reference code's "
             "`np.quantile(scores, floor((n + 1) eta) / n)` (interpolated). `ref / exact`: the mean over splits "
             "of the per-split volume ratio; `gap explained`: how much of our exact volume's excess over the "
             "paper's Table I the reference rule removes, `(exact - reference) / (exact - paper)`, where that excess is "
             "over 5 %.", "",
             "| dataset | method | splits | coverage exact % | coverage ref % | volume exact | volume ref | "
             "ref / exact | exact / paper | ref / paper | gap explained |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (d, m), g in runs.groupby(["dataset", "method"], sort=False):
        if g.volume_paper_exact.isna().any():
            continue
        factor = PAPER_UNIT_FACTOR.get(d, 1.0)
        paper = PAPER_TABLE1.get(d, {}).get(m, (None, None))[1]
        exact, ref = g.volume_paper_exact.mean(), g.volume_paper.mean()
        cells = ["-", "-", "-"]
        if paper:
            gap = exact * factor - paper
            cells = [f"{exact * factor / paper:.2f}", f"{ref * factor / paper:.2f}",
                     f"{100 * (exact - ref) * factor / gap:.0f} %" if gap > 0.05 * paper else "under 5 %"]
        lines.append(f"| {d} | {m} | {g.seed.nunique()} | {100 * g.coverage_exact.mean():.1f} | "
                     f"{100 * g.coverage.mean():.1f} | {exact:.4g} | {ref:.4g} | "
                     f"{(g.volume_paper / g.volume_paper_exact).mean():.3f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def twin_note(records: list[dict]) -> str:
    """A sentence for the table's footer when some of its splits were read off their twin variant's."""
    twins = sorted({r["from_variant"] for r in records if r.get("from_variant")})
    n = sum(bool(r.get("from_variant")) for r in records)
    return (f" {n} of these {len(records)} splits are the `{'`, `'.join(twins)}` run's fits calibrated by the exact "
            f"rule (the same fits and fit times; `benchmarks.harness.tasks.TWINS`)." if n else "")


def markdown_table(t1, title: str) -> str:
    lines = [f"## {title}", "",
             "Coverage in % and volume as mean (std) over splits. **Volume is the paper's convention, "
             "det(C)^1/2 without the unit-ball constant** (multiply by pi for the area). "
             "`paper` columns are the paper's Table I. `in paper units` = our volume times the unit "
             "factor of the dataset's loader (below), and `ratio` = that / paper.", "",
             "| dataset | method | splits | coverage % | paper cov. % | volume | in paper units | paper volume "
             "| ratio | fit s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t1.iterrows():
        paper_cov, paper_vol = PAPER_TABLE1.get(r.dataset, {}).get(r.method, (None, None))
        factor = PAPER_UNIT_FACTOR.get(r.dataset, 1.0)
        ratio = f"{r.volume_mean * factor / paper_vol:.2f}" if paper_vol else "-"
        lines.append(f"| {r.dataset} | {r.method} | {r.n_splits} | {100 * r.coverage_mean:.1f} "
                     f"({100 * (r.coverage_std if r.coverage_std == r.coverage_std else 0):.1f}) | "
                     f"{paper_cov if paper_cov is not None else '-'} | {r.volume_mean:.4g} ({r.volume_std:.3g}) | "
                     f"{r.volume_mean * factor:.3g} | {paper_vol if paper_vol is not None else '-'} | {ratio} | "
                     f"{r.fit_seconds_mean:.2f} |")
    notes = [f"- {d}: unit factor {PAPER_UNIT_FACTOR[d]:.0e}" for d in dict.fromkeys(t1.dataset)
             if d in PAPER_UNIT_FACTOR]
    if notes:
        lines += ["", "Unit factors: the loaders scale both targets (residential_building / 100; "
                  "indoor_localization in km, not m) and det(C)^1/2 scales with the product of the two target "
                  "scales, while the paper reports its volumes in the original units.", *notes]
    return "\n".join(lines) + "\n"


def plot_volumes(runs, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(runs.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        sub = runs[runs.dataset == d]
        methods = list(dict.fromkeys(sub.method))
        ax.boxplot([sub[sub.method == m].volume_paper for m in methods], tick_labels=[m.upper() for m in methods],
                   showfliers=False)
        for i, m in enumerate(methods, start=1):
            paper = PAPER_TABLE1.get(d, {}).get(m)
            if paper:  # drawn in our units
                ax.plot([i - 0.35, i + 0.35], [paper[1] / PAPER_UNIT_FACTOR.get(d, 1.0)] * 2, color="tab:red",
                        lw=1.5, label="paper (in our units)" if i == 1 else None)
        ax.set_yscale("log")
        ax.set_title(f"{d} ({sub.seed.nunique()} splits)", fontsize=10)
        ax.set_ylabel("det(C)^1/2 (paper convention)")
    if axes[0][0].get_legend_handles_labels()[0]:  # a data set of the paper's: its figures drawn
        axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


