"""``lmve-evaluate``: a labelled validation walk against a bundle, as a positioning team checks a site.

    lmve-evaluate --bundle runs/site7/bundle --csv walk.csv --out runs/site7/walk-1
    lmve-evaluate --bundle repo/ --model BUILDINGID=1 --csv walk.csv --group-by PHONEID,day:TIMESTAMP
    lmve-evaluate --bundle B --csv walk.parquet --fail-under 0.85      # for a CI pipeline

The walk has the training file's columns, targets included (CSV or Parquet). Its rows are answered as
``POST /predict-region`` answers them; the figures are :mod:`training.figures.walk`'s: coverage at the bundle's
level with its binomial interval, the reliability curve over ``--levels``, region sizes, positioning errors
(mean, median, RMSE, p75, CEP, CE95), a floor bundle's floor figures and IPIN score, typicality and the shift
test's evidence over the walk in order, the same per group (each group's own curve, and groups whose errors
are far above the rest's named), and a verdict. ``--out DIR`` writes ``report.md``, ``metrics.json``,
``reliability.png`` (the walk's curve and each group's) and ``error_cdf.png`` (atomically: all of them or
none).

Exit status: 0 when nothing is short (coverage at the level over all rows, every level of the curve, every
group at the level and along its curve), 1 when something is, or, with ``--fail-under LEVEL``, 1 exactly
when the walk's coverage is below LEVEL; 2 for bad input.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from models.exceptions import InputError
from training import run_command
from training.commands.inputs import bundle_parser
from training.figures.accuracy import ERROR_KEYS
from training.figures.walk import DEFAULT_LEVELS, GroupBy, evaluate, parse_levels

#: groups drawn as their own line on the error CDF and the reliability plot (the largest ones)
CDF_GROUPS = 8
#: groups of each breakdown the terminal lists (report.md lists them all)
GROUP_LINES = 8


def build_parser() -> argparse.ArgumentParser:
    p = bundle_parser("lmve-evaluate", __doc__)
    p.add_argument("--csv", type=Path, required=True, metavar="WALK",
                   help="the labelled walk: the bundle's feature and target columns by name (.csv, .csv.gz, .parquet)")
    p.add_argument("--method", default=None, help="evaluate one method (default: the one /predict-region serves)")
    p.add_argument("--group-by", default=None, metavar="COL[,COL]",
                   help="a breakdown per value of each column (day:COL: per UTC day of a timestamp column)")
    p.add_argument("--unit", default=None, metavar="positions|rows|COL",
                   help="what the intervals count (default: the walk's positions where its readings repeat them, as "
                        "training groups a survey; else rows); COL: a column of the walk (a phone, a user)")
    p.add_argument("--levels", default=DEFAULT_LEVELS, metavar="LO:HI[:STEP]",
                   help=f"the reliability curve's levels (default {DEFAULT_LEVELS}: 0.50, 0.55, ..., 0.95, 0.99)")
    p.add_argument("--out", type=Path, default=None, help="write report.md, metrics.json and the plots here")
    p.add_argument("--fail-under", type=float, default=None, metavar="LEVEL",
                   help="exit 1 when the walk's coverage is below LEVEL (instead of the verdict)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-evaluate", build_parser(), _run, argv)


def _run(args) -> int:
    from training.commands.inputs import open_model, read_walk

    if args.fail_under is not None and not 0.0 < args.fail_under <= 1.0:
        raise InputError(f"--fail-under {args.fail_under}: expected a level in (0, 1]", field="--fail-under",
                         expected="a number in (0, 1]", received=str(args.fail_under))
    levels = parse_levels(args.levels)
    group_by = GroupBy.parse(args.group_by)
    unit = None if args.unit is None else args.unit.strip()
    columns = [*group_by, *([GroupBy(unit)] if unit not in (None, "rows", "positions")
                            and unit not in {g.name for g in group_by} else [])]
    model = open_model(args.bundle, args.model)
    walk = read_walk(args.csv, model, columns)
    figures, rows = evaluate(model, walk, method=args.method, levels=levels, group_by=group_by, unit=unit)
    figures = {"bundle_id": model.manifest.get("bundle_id"), "model": args.model, "walk": walk.name,
               "walk_sha256": walk.sha256, **figures}
    print(summary_text(figures))
    if args.out is not None:
        from models.bundle import write_atomic

        write_atomic(args.out, {"metrics.json": json.dumps(figures, indent=2).encode(),
                                "report.md": report(figures).encode(),
                                "reliability.png": plot_reliability(figures),
                                "error_cdf.png": plot_error_cdf(figures, rows.error, walk, group_by)})
        print(f"lmve-evaluate: report in {args.out}/report.md")
    if args.fail_under is not None:
        return int(figures["coverage"] < args.fail_under)
    return 0 if figures["verdict"]["holds"] else 1


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _num(v) -> str:
    return f"{v:.4g}"


def summary_text(f: dict) -> str:
    """The figures in a few lines, for the terminal."""
    u = f["units"]
    e = f["error"]
    lines = [f"lmve-evaluate: {f['walk']}: {f['n_rows']} rows, method {f['method']}"
             + (f" (fallback: {f['fallback_reason']})" if f["fallback_reason"] else ""),
             f"  coverage {_pct(f['coverage'])} at level {100 * f['level']:g} % "
             f"(95 % interval {_pct(f['coverage_interval'][0])} to {_pct(f['coverage_interval'][1])} "
             f"{over_words(f)})",
             f"  area mean {_num(f['area_mean'])} {u['area']} (sqrt det C mean {_num(f['sqrt_det_mean'])}), accuracy "
             f"radius median {_num(f['accuracy_median'])} {u['accuracy']}",
             "  error " + ", ".join(f"{k} {_num(e[k])}" for k in ERROR_KEYS) + f" {u['error']}"]
    if f.get("typicality_mean") is not None:
        lines.append(f"  typicality mean {f['typicality_mean']:.3g} (about 0.5 for readings like the calibration's)"
                     + (f"; {shift_words(f['shift'])}" if f.get("shift") else ""))
    for name, per in f["groups"].items():
        for v, s in list(per.items())[:GROUP_LINES]:
            lines.append(f"  {name} {v}: {s['n_rows']} rows, coverage {_pct(s['coverage'])}"
                         + (f", short at {', '.join(f'{x:g}' for x in s['short_levels'])}" if s["short_levels"] else "")
                         + (f", typicality mean {s['typicality_mean']:.3g}" if s.get("typicality_mean") is not None else "")
                         + f", error median {_num(s['error']['median'])}")
        if len(per) > GROUP_LINES:
            lines.append(f"  ... {len(per) - GROUP_LINES} more {name} groups in report.md")
    if "floors" in f:
        fl = f["floors"]
        lines.append(f"  floors: hit rate {_pct(fl['floor_hit_rate'])}, floor-set coverage {_pct(fl['floor_set_coverage'])}, "
                     f"position coverage {_pct(fl['position_coverage'])}, IPIN score {_num(fl['ipin_score'])} m")
    lines.append(f"  verdict: {f['verdict']['words']}")
    if f["verdict"]["advice"]:
        lines.append(f"  what to do: {f['verdict']['advice']}")
    return "\n".join(lines)


def over_words(f: dict) -> str:
    """What the intervals count, in words: ``over the 10 positions (each weighing the same; 120 rows: 96.7 %)``."""
    u = f["interval_over"]
    if u["unit"] == "rows":
        return f"over the {f['n_rows']} rows" + (" (no position repeats: rows are the units)" if u["automatic"] else "")
    return (f"over the {u['n']} {u['unit']}, each weighing the same"
            + (" (the walk's readings repeat its positions)" if u["automatic"] else "")
            + f"; over the {f['n_rows']} rows {_pct(f['coverage_rows'])}")


def shift_words(shift: dict) -> str:
    """The shift test over the walk in words."""
    alarm = (f"alarm at row {shift['alarm_at_row']}" if shift["alarm_at_row"] is not None else
             "no alarm")
    return (f"shift test evidence {shift['evidence']:.3g} after {shift['rows']} rows in file order, most "
            f"{shift['max']:.3g}: {alarm} (it sounds at 1/delta = {1 / shift['delta']:g})")


def _short(s: dict) -> str:
    return ", ".join(f"{x:g}" for x in s.get("short_levels") or []) or "-"


def _row(name: str, s: dict, floors: bool) -> str:
    e = s["error"]
    typ = s.get("typicality_mean")
    cells = [name, str(s["n_rows"]), _pct(s["coverage"]),
             f"{_pct(s['coverage_interval'][0])} to {_pct(s['coverage_interval'][1])}",
             "yes" if s["holds"] else "**no**", _short(s), "-" if typ is None else f"{typ:.3g}",
             _num(s["area_mean"]), _num(s["accuracy_median"]), *(_num(e[k]) for k in ERROR_KEYS)]
    if floors:
        fl = s["floors"]
        cells += [_pct(fl["floor_hit_rate"]), _pct(fl["floor_set_coverage"]), _num(fl["ipin_score"])]
    return "| " + " | ".join(cells) + " |"


def report(f: dict) -> str:
    """``report.md``: the verdict, the figures, per group, the reliability curve and the plots."""
    u = f["units"]
    floors = "floors" in f
    head = ["rows", "coverage", "95 % interval", "holds", "short levels", "typicality mean", "area mean",
            "accuracy median", *(f"error {k}" for k in ERROR_KEYS)]
    if floors:
        head += ["floor hit rate", "floor-set coverage", "IPIN score"]
    table = ["| | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1), _row("all rows", f, floors)]
    lines = [f"# lmve-evaluate: {f['walk']}", "",
             f"- bundle `{f['bundle_id']}`" + (f", model `{f['model']}`" if f["model"] else "")
             + f"; walk sha256 `{f['walk_sha256'][:16]}...`, {f['n_rows']} rows",
             f"- method {f['method']}" + (f" (fallback: {f['fallback_reason']})" if f["fallback_reason"] else ""),
             f"- level {100 * f['level']:g} %; an error is the distance from a region's centre to the truth"
             + (" on the ground (geodesic metres)" if u["ground"] else "")
             + f"; areas in {u['area']}, accuracy radii and errors in {u['error']}",
             f"- mean sqrt det C (the paper's volume, target units): {_num(f['sqrt_det_mean'])}",
             f"- coverage, intervals and tests {over_words(f)}", "",
             f"**Verdict.** {f['verdict']['words']}", ""]
    if f["verdict"]["advice"]:
        lines += [f"What to do: {f['verdict']['advice']}", ""]
    lines += [*table, ""]
    if f.get("shift"):
        lines += [f"Typicality: the rows' mean p-value is {f['typicality_mean']:.3g} (about 0.5 for readings like the "
                  f"calibration's, smaller for readings unlike them); the {shift_words(f['shift'])}.", ""]
    for name, per in f["groups"].items():
        lines += [f"## Per {name}", "", "| " + name + " | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
        lines += [_row(v, s, floors) for v, s in per.items()]
        lines += ["", f"A group holds when its one-sided binomial test at the level passes at 5 % / {len(per)}, and no "
                  f"level of its curve is short (5 % / ({len(per)} x the levels); Bonferroni).", ""]
        for o in f.get("error_outliers", {}).get(name, []):
            lines += [f"- {name} {o['group']}: errors far above the rest's (median {_num(o['median'])} against "
                      f"{_num(o['rest_median'])}; one-sided Mann-Whitney p = {o['p_value']:.2g})"]
        lines += _curve_table(name, per) + [""]
    lines += ["## Reliability", "", "Coverage of this walk at each level, with the thresholds of the bundle's stored "
              "calibration scores; a level is short when its one-sided p-value is below 5 % over the curve's "
              "levels.", "", "| level | coverage | 95 % interval | short |", "|---|---|---|---|"]
    for r in f["reliability"]:
        if r["attainable"]:
            lines.append(f"| {r['level']:g} | {_pct(r['coverage'])} | {_pct(r['interval'][0])} to "
                         f"{_pct(r['interval'][1])} | {'**short**' if r['short'] else ''} |")
        else:
            lines.append(f"| {r['level']:g} | above what the calibration attains | | |")
    lines += ["", "![reliability](reliability.png)", "", "![error CDF](error_cdf.png)", ""]
    return "\n".join(lines)


def _curve_table(name: str, per: dict) -> list[str]:
    """Each group's coverage at each level (short ones in bold)."""
    levels = [r["level"] for r in next(iter(per.values()))["reliability"] if r["attainable"]] if per else []
    if not levels:
        return []
    out = ["", f"Coverage per {name} and level (**short** in bold):", "",
           "| " + name + " | " + " | ".join(f"{v:g}" for v in levels) + " |", "|" + "---|" * (len(levels) + 1)]
    for v, s in per.items():
        at = {r["level"]: r for r in s["reliability"]}
        out.append("| " + v + " | " + " | ".join(
            (f"**{_pct(at[x]['coverage'])}**" if at[x]["short"] else _pct(at[x]["coverage"])) for x in levels) + " |")
    return out


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_reliability(f: dict) -> bytes:
    """PNG: the walk's coverage against level with its 95 % intervals, beside the diagonal, and the curve of
    each group of the first breakdown (the :data:`CDF_GROUPS` largest); short levels are marked with a red x."""
    plt = _pyplot()
    pts = [r for r in f["reliability"] if r["attainable"]]
    fig, ax = plt.subplots(figsize=(5.8, 4.8))
    lv = [r["level"] for r in pts]
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="coverage = level")
    ax.fill_between(lv, [r["interval"][0] for r in pts], [r["interval"][1] for r in pts], color="black",
                    alpha=0.12, label="95 % interval (all rows)")
    ax.plot(lv, [r["coverage"] for r in pts], marker="o", ms=3.5, color="black", lw=1.6, label=f"all rows ({f['n_rows']})")
    lows = [r["interval"][0] for r in pts] + [r["coverage"] for r in pts]
    shorts = [(r["level"], r["coverage"]) for r in pts if r["short"]]
    if f["groups"]:
        name, per = next(iter(f["groups"].items()))
        biggest = sorted(per, key=lambda v: -per[v]["n_rows"])[:CDF_GROUPS]
        for v in biggest:
            g = [r for r in per[v]["reliability"] if r["attainable"]]
            ax.plot([r["level"] for r in g], [r["coverage"] for r in g], marker=".", lw=1.0, alpha=0.85,
                    label=f"{name} {v} ({per[v]['n_rows']})" + (" short" if per[v]["short_levels"] else ""))
            lows += [r["coverage"] for r in g]
            shorts += [(r["level"], r["coverage"]) for r in g if r["short"]]
    if shorts:
        ax.scatter(*zip(*shorts), marker="x", s=46, color="tab:red", zorder=5, label="short (Bonferroni)")
    ax.axvline(f["level"], color="tab:red", lw=0.8, label=f"bundle level {f['level']:g}")
    lo = min(lv + lows) - 0.05
    ax.set_xlim(max(lo, 0), 1.0)
    ax.set_ylim(max(lo, 0), 1.0)
    ax.set_xlabel("level asked for")
    ax.set_ylabel("coverage on the walk")
    ax.set_title(f"{f['walk']}: {f['n_rows']} rows, {f['method']}", fontsize=10)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    return _png(fig)


def plot_error_cdf(f: dict, error, walk, group_by) -> bytes:
    """PNG: the positioning ``error`` 's CDF (all rows, and up to :data:`CDF_GROUPS` groups of the first
    breakdown), with the median, p75 and CE95 marked."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.4))

    def cdf(e, **kw):
        e = np.sort(e)
        ax.step(e, np.arange(1, e.size + 1) / e.size, where="post", **kw)

    cdf(error, color="black", lw=1.6, label=f"all rows ({error.size})")
    if group_by:
        labels = walk.groups[group_by[0].name]
        values, counts = np.unique(labels.astype(str), return_counts=True)
        for v in values[np.argsort(-counts)][:CDF_GROUPS]:
            mask = labels.astype(str) == v
            cdf(error[mask], lw=0.9, alpha=0.8, label=f"{group_by[0].name} {v} ({int(mask.sum())})")
    for q, name in ((50, "CEP"), (75, "p75"), (95, "CE95")):
        x = float(np.percentile(error, q))
        ax.axvline(x, color="grey", lw=0.7, ls=":")
        ax.text(x, 0.02 + q / 1000, f" {name} {x:.3g}", fontsize=7, color="grey")
    ax.set_xlabel(f"error ({f['units']['error']})")
    ax.set_ylabel("share of rows")
    ax.set_ylim(0, 1.01)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title(f"positioning error, {walk.name}", fontsize=10)
    fig.tight_layout()
    return _png(fig)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
