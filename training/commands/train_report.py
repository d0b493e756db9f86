"""Human-facing outputs of a training run: a printed table, a markdown report and a plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from models import registry
from models.radio_map import GUARANTEE as RADIO_GUARANTEE
from training.figures.survey_scale import scale_line, size_line
from training.pipeline import CRITERIA
from training.pipeline.served_volume import selection_line


def label(name: str) -> str:
    spec = registry.METHODS.get(name)
    return spec.label if spec else name


def across_line(across: dict) -> str:
    """``--calibrate-across`` in words: the units per part and the training rows their values cost."""
    u, r = across["units"], across["rows"]
    groups = f", at {across['held_out_groups']} held-out groups" if across.get("held_out_groups") else ""
    scored = f", scored out of fold over {across['folds']} unit folds" if across.get("mode") == "cross-fit" else ""
    return (f"{','.join(across['columns'])}: {across['n_units']} units; test {u['test']} ({r['test']} rows), "
            f"calibration {u['calibration']} ({r['calibration']} rows{scored}){groups}, training {u['train']} "
            f"({r['train']} rows); {r['set_aside']} rows set aside (a held-out unit's value or group); "
            f"{'exact' if across['exact'] else 'approximate'} (rule {across['rule']})")


def _grouping(calibration: dict) -> str:
    g = calibration.get("grouping")
    if not g:
        return "none (rows are split and calibrated at random, the paper's protocol)"
    how = "automatic: most rows share their position with another row" if g.get("automatic") else "--groups"
    return f"by {g['by']} ({g['n_groups']} groups; {how}); calibration rule {calibration.get('rule')}"


def part_words(calibration: dict) -> str:
    """What a run's figures are measured on, in words: ``"test"`` (its test part), or ``"held-out"`` where
    there is none and each unit was left out in turn (calibrated across units, cross-fit)."""
    across = calibration.get("across") or {}
    return "held-out" if across and across.get("held_out", "test part") != "test part" else "test"


def _units(calibration: dict) -> str:
    """What one test group is, in words: ``"positions"``, ``"PHONEID units"``."""
    if calibration.get("across"):
        return f"{','.join(calibration['across']['columns'])} units"
    g = calibration.get("grouping") or {}
    return "positions" if g.get("by") == "position" else f"{g.get('by', '')} groups".strip()


def phase_line(history: dict | None) -> str:
    """``phases: init 350 steps 2.1 s, train 900 steps 6.3 s, selection 0.1 s`` from an LMVE ``history_``."""
    if not history:
        return "phases: not recorded"
    parts = []
    for phase, h in history.items():
        steps = f"{h['steps']} steps " if "steps" in h else ""
        parts.append(f"{phase} {steps}{h['seconds']:.1f} s")
    precision = next((h["precision"] for h in history.values() if "precision" in h), None)
    return "phases" + (f" ({precision})" if precision else "") + ": " + ", ".join(parts)


def centre_line(centre: dict | None) -> str:
    """``knn (chosen by 5-fold ...; CV RMSE: paper 0.078, scaled 0.012, knn 0.004); test RMSE 0.005``."""
    if not centre:
        return "not recorded"
    if isinstance(centre, str):
        return centre
    text = centre.get("name", "?")
    if centre.get("cv"):
        key = centre.get("criterion", "rmse")
        ranked = sorted(centre["cv"].items(), key=lambda kv: (kv[1].get("status", "kept") != "kept",
                                                             kv[1].get(key, float("inf"))))
        cv = ", ".join(f"{n} {e[key]:.4g}" + _dropped(e) if key in e else f"{n}{_dropped(e)}" for n, e in ranked)
        text += f" (chosen by {centre.get('selected_by', 'cross-validation')}; CV {CRITERIA[key]}: {cv})"
    if centre.get("fingerprint"):
        text += f"; {fingerprint_words(centre['fingerprint'])}"
    if centre.get("centre_folds_by"):  # --calibrate-across: how the calibration's fold centres were fitted
        text += f"; calibration scored by centres of {centre['centre_folds_by']}"
    if centre.get("test"):
        t = centre["test"]
        text += f"; test error RMSE {t['rmse']:.4g}, median {t['median']:.4g}"
    return text


def fingerprint_words(fp: dict) -> str:
    """What the fingerprint search chose and by how much: ``fingerprint configuration (72 searched, each unit held
    out): dbm, cutoff 0 dB, k=11, distance weights, RMSE 0.0189 against the textbook's 0.0224 (16 % lower)``,
    and where the one-standard-error rule kept another representation than the lowest, which and why."""
    c, key = fp["chosen"], CRITERIA.get(fp.get("criterion", "rmse"), "error")
    text = (f"fingerprint configuration ({fp.get('configurations', '?')} searched, {fp.get('held_out', '?')} held "
            f"out): {c['representation']}, cutoff {c['cutoff_db']:g} dB, k={c['n_neighbors']}, {c['weights']} "
            f"weights, {key} {fp['error']:.4g}")
    if fp.get("textbook"):
        text += (f" against the textbook's {fp['textbook']:.4g} "
                 f"({100 * (1 - fp['error'] / fp['textbook']):.0f} % lower)")
    rule = fp.get("rule") or {}
    low = rule.get("lowest")
    if low and low["representation"] != c["representation"]:
        text += (f"; {low['representation']} had the lowest ({low['error']:.4g}), {rule['difference']:.3g} below "
                 f"on average over the {rule['units']} units, within one standard error ({rule['standard_error']:.3g}) "
                 f"of their paired differences: {c['representation']} kept")
    return text


def _dropped(record: dict) -> str:
    """`` (dropped at the screen)`` / `` (dropped after 2 folds)`` for a dropped candidate, else ``""``."""
    if record.get("status") != "dropped":
        return ""
    if record.get("stage") == "recall":
        return " (recalled, then dropped on every fold)"
    if record.get("stage") == "race":
        return f" (dropped after {record['folds']} fold{'s' if record['folds'] != 1 else ''})"
    return " (dropped at the screen)"


def candidates_table(centre: dict | None) -> str:
    """A markdown table of ``centre="auto"``'s candidates: kept or dropped, what each was fitted on, its
    error, its seconds, and why a dropped one was dropped (``""`` when there was no selection)."""
    cv = (centre or {}).get("cv") if isinstance(centre, dict) else None
    if not cv:
        return ""
    key = centre.get("criterion", "rmse")
    lines = [f"| candidate | status | rows per fit | scored on folds | CV {CRITERIA[key]} | seconds | why |",
             "|---|---|---|---|---|---|---|"]
    for name, e in cv.items():
        chosen = " (chosen)" if name == centre.get("name") else ""
        error = f"{e[key]:.4g}" if key in e else "-"
        folds = _fold_list(e["scored_folds"]) if e.get("scored_folds") else e.get("folds", "-")
        lines.append(f"| {name}{chosen} | {e.get('status', 'kept')} | {e.get('rows', '-')} | {folds} | "
                     f"{error} | {e.get('seconds', 0.0):.1f} | {e.get('reason', '')} |")
    return "\n".join(lines)


def _fold_list(folds: list[int]) -> str:
    """``1-5`` for consecutive folds, else ``1, 3``."""
    if folds == list(range(folds[0], folds[-1] + 1)) and len(folds) > 1:
        return f"{folds[0]}-{folds[-1]}"
    return ", ".join(str(f) for f in folds)


def selection_table(selection: dict) -> str:
    """A markdown table of the held-out figures that chose the served method (``""`` without a selection)."""
    held = selection.get("held_out")
    if not held:
        return ""
    rank = {m: i + 1 for i, m in enumerate(selection.get("order", []))}
    lines = [f"Chosen on {selection['n_rows']} held-out rows, the {selection['rows']} ({selection['rule']}), by "
             f"the {selection['criterion']}; the calibrated columns are "
             f"{selection.get('calibrated_on', 'the served regions on the test part')}.", "",
             "| method | rank | held-out volume (own quantile) | calibrated coverage | calibrated volume |",
             "|---|---|---|---|---|"]
    for name, f in sorted(held.items(), key=lambda kv: rank.get(kv[0], len(rank) + 1)):
        ranked = name in rank
        lines.append(f"| {label(name)} | {rank.get(name, 'not served (box)')} | "
                     f"{_num(f['volume']) if ranked else '-'} | {100 * f['coverage']:.1f} % | "
                     f"{_num(f['volume_calibrated'])} |")
    return "\n".join(lines)


def _num(v) -> str:
    return "unbounded" if v is None else f"{v:.4g}"


def stages_table(stages: dict) -> str:
    """A markdown table of a run's stages: seconds, share of the total, peak resident memory."""
    total = sum(s["seconds"] for s in stages.values()) or 1.0
    lines = ["| stage | seconds | share | peak memory (MiB) |", "|---|---|---|---|"]
    lines += [f"| {name} | {s['seconds']:.1f} | {100 * s['seconds'] / total:.0f} % | {s['peak_rss_mib']:.0f} |"
              for name, s in stages.items()]
    return "\n".join(lines)


#: where the target lies against the interval, in the plot's titles
VERDICT_WORDS = {"within": "within", "short": "above it: short", "above": "below it: more than asked",
                 "inconclusive": "within, inconclusive"}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def metrics_table(metrics: dict, coverage: float, part: str = "test") -> str:
    """A fixed-width table: method, test coverage and its exact 95 % interval (over the rows, or the test
    groups when grouped: :func:`training.figures.coverage.coverage_interval`) with where the target lies against it,
    mean volume (true and paper convention), the RMSE of the regions' centres, fit time. ``part``: what the
    figures are measured on, in words (``"test"``, or ``"held-out"`` where each unit is left out in turn:
    :func:`part_words`)."""
    head = (f"{'method':<8} {'coverage':>9} {'95 % interval':>14} {'target':>12} {'area (true)':>12} "
            f"{'sqrt det C':>11} {'centre RMSE':>12} {'fit s':>7}")
    lines = [head, "-" * len(head)]
    for name, m in metrics.items():
        test = m.get("coverage_test")
        interval = f"{_pct(test['interval'][0])}-{_pct(test['interval'][1])}%" if test else "-"
        lines.append(f"{label(name):<8} {100 * m['coverage']:>8.1f}% {interval:>14} "
                     f"{test['verdict'] if test else '-':>12} {m['volume']:>12.4g} "
                     f"{m['volume_paper']:>11.4g} {m.get('centre_rmse', float('nan')):>12.4g} "
                     f"{m.get('fit_seconds', float('nan')):>7.1f}")
    first = next((m["coverage_test"] for m in metrics.values() if "coverage_test" in m), None)
    over = f"the {first['n']} {part} {first['unit']}" if first else f"the {part} rows"
    lines.append(f"target coverage {100 * coverage:.1f}%; intervals exact (Clopper-Pearson) over {over}, 'target': "
                 "within the interval (a shortfall beyond the tolerance ruled out), inconclusive (within, and so is "
                 f"such a shortfall: too few {part} units), short of it or above it; 'sqrt det C' is the paper's "
                 "volume convention (no unit-ball constant); Copula regions are boxes; 'centre RMSE': the regions' "
                 "centres against the true points (LMVE's own with --learned-centre)")
    return "\n".join(lines)


def coverage_words(metrics: dict, units: str = "rows", part: str = "test") -> list[str]:
    """Per method, in words: its test coverage, the interval, and whether the target lies within it (a
    shortfall that chance explains) or beyond it (a shortfall chance does not explain, or more coverage
    than asked). ``units``: what the test counts when it counts groups (``"positions"``); ``part``: as
    :func:`metrics_table`'s."""
    lines = []
    for name, m in metrics.items():
        t = m.get("coverage_test")
        if not t:
            continue
        what = "rows" if t["unit"] == "rows" else units
        stated = (f"**{label(name)}**: {_pct(t['estimate'])} % over {t['n']} {part} {what}, 95 % interval "
                  f"{_pct(t['interval'][0])}-{_pct(t['interval'][1])} %")
        target, p = f"{_pct(t['level'])} % target", t["p_value"]
        if t["verdict"] == "short":
            lines.append(f"- {stated}: **short of the {target} beyond its interval**: a shortfall that chance over "
                         f"{t['n']} {part} {what} does not explain (one-sided p = {p:.2g}). The calibration rows do "
                         "not stand for the test rows (a unit split across parts, or a drift between them), or the "
                         "calibration is too small to be steady; check the grouping before serving this method.")
        elif t["verdict"] == "above":
            lines.append(f"- {stated}: above the {target} beyond its interval: the regions hold more than asked "
                         "(larger than the level needs).")
        elif t["verdict"] == "inconclusive":
            lines.append(f"- {stated}: **inconclusive**: the {target} lies within the interval, and so does a "
                         f"shortfall of more than {_pct(t['tolerance'])} points; {t['n']} {part} {what} cannot tell "
                         f"(about {t['needed']} would, at a coverage on target).")
        elif t["estimate"] < t["level"]:
            lines.append(f"- {stated}: the {target} is within the interval: a shortfall of this size is what "
                         f"{t['n']} {part} {what} give by chance (one-sided p = {p:.2g}); more {part} {what} would "
                         "tell.")
        else:
            lines.append(f"- {stated}: the {target} is within the interval and the coverage at or above it: "
                         f"no shortfall (one of more than {_pct(t['tolerance'])} points is ruled out).")
    return lines


def plot_test_regions(path: Path, model, X_raw: np.ndarray, Y: np.ndarray, max_regions: int = 25, seed: int = 0,
                      centers: np.ndarray | None = None, extent: dict | None = None, regions: dict | None = None):
    """PNG: each method's test coverage where it happens, with a sample of its calibrated regions.

    One point per test position (the distinct true positions of the rows), coloured by the share of its rows
    whose region holds it (so ten readings of one position are one point, not ten overdrawn crosses), the
    worst on top; when every position has one row, green dots inside and red crosses outside. Each panel's
    title gives the coverage over the positions with its exact 95 % interval
    (:func:`training.figures.coverage.coverage_interval`). The regions drawn are those of ``max_regions`` positions
    picked at random, one row each, with a line from each centre to its true position. ``extent`` (a survey's
    :func:`training.figures.survey_scale.survey_scale`) draws the surveyed positions' bounding box and convex hull, and says
    in the title what share of the box the method's mean region is. ``regions`` (method -> regions of the
    rows of ``X_raw``), when given, are drawn instead of the model's: a cross-fit's with each unit left out in
    turn, where there is no test part (``training.pipeline.TrainResult.held_out``). Returns, per method, the
    title's interval (:func:`training.figures.coverage.coverage_interval`) and ``points``, the points drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from training.figures.coverage import coverage_interval, group_shares

    positions, where, counts = np.unique(np.round(np.asarray(Y, dtype=np.float64), 9), axis=0,
                                         return_inverse=True, return_counts=True)
    where = where.ravel()
    grouped = bool(counts.max() > 1)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(positions), size=min(max_regions, len(positions)), replace=False)
    pick = np.array([rng.choice(np.flatnonzero(where == k)) for k in chosen], dtype=np.int64)
    names = list(reversed(model.serving_order))
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names) + (0.8 if grouped else 0), 5.2), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    drawn = {}
    for ax, name in zip(axes[0], names):
        region = regions[name] if regions is not None else \
            model.predict_region(X_raw, method=name, centers=centers, typicality=False).regions
        inside = region.contains(Y)
        if grouped:
            share = group_shares(inside, where)  # where: 0 .. len(positions) - 1, every code present
            order = np.argsort(-share, kind="stable")  # the lowest share drawn last, on top
            dots = ax.scatter(positions[order, 0], positions[order, 1], c=share[order], cmap="RdYlGn", vmin=0.0,
                              vmax=1.0, s=18, edgecolors="k", linewidths=0.3)
        else:
            ax.scatter(Y[inside, 0], Y[inside, 1], s=6, c="tab:green", label="inside", alpha=0.6)
            ax.scatter(Y[~inside, 0], Y[~inside, 1], s=10, c="tab:red", marker="x", label="outside")
        if region.bounded:
            poly = region.boundary(64)[pick]
            for i, p in enumerate(poly):
                ax.plot(p[:, 0], p[:, 1], lw=0.8, color="tab:blue", alpha=0.7)
                ax.plot([region.centers[pick[i], 0], Y[pick[i], 0]], [region.centers[pick[i], 1], Y[pick[i], 1]],
                        lw=0.5, color="grey")
        test = coverage_interval(inside, region.coverage, where if grouped else None)
        drawn[name] = {**test, "points": len(positions) if grouped else len(Y)}
        over = f"{test['n']} positions" if grouped else f"{test['n']} rows"
        area = region.volume().mean()
        if extent:
            _draw_extent(ax, extent)
        share = f" ({100 * area / extent['bbox_area']:.0f}% of the survey's box)" if extent and extent["bbox_area"] \
            else ""
        ax.set_title(f"{label(name)}: coverage {_pct(test['estimate'])}% over {over}\n95% interval "
                     f"{_pct(test['interval'][0])}-{_pct(test['interval'][1])}%: target {_pct(test['level'])}% "
                     f"{VERDICT_WORDS[test['verdict']]}\nmean area {area:.3g}{share}", fontsize=9)
        ax.set_xlabel(model.target_names[0])
    axes[0][0].set_ylabel(model.target_names[1])
    if grouped:
        fig.colorbar(dots, ax=axes[0].tolist(), shrink=0.8, fraction=0.03, pad=0.01,
                     label="share of the position's rows inside their region")
        if extent:
            axes[0][0].legend(loc="best", fontsize=7)
    else:
        axes[0][0].legend(loc="best", fontsize=8)
    held = "test" if regions is None else "held-out (each unit left out in turn)"
    fig.suptitle(f"{held} {'positions' if grouped else 'points'} and {len(pick)} calibrated "
                 f"{100 * model.coverage:.0f}% regions", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def _draw_extent(ax, extent: dict) -> None:
    """The survey's bounding box (dashed) and convex hull (dotted) on ``ax``."""
    (x0, y0), (x1, y1) = extent["bbox"]
    ax.plot([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0], ls="--", lw=0.9, color="0.35", label="survey bounding box")
    hull = np.asarray(extent["hull"], dtype=np.float64)
    if len(hull) >= 3:
        ring = np.vstack([hull, hull[:1]])
        ax.plot(ring[:, 0], ring[:, 1], ls=":", lw=1.0, color="0.2", label="survey convex hull")


def map_words(accuracy: dict) -> str:
    """The survey map's caption: what it shows, how it was made and how good it is."""
    err = accuracy["area"]["median_abs_rel_error"]
    return ("The served method's expected region area (left) and the centre's expected error (right) over the "
            "surveyed positions' hull, interpolated between the positions (a Gaussian kernel one survey spacing "
            "wide)" + ("" if err is None else f"; each position left out and interpolated from the others, the area "
                       f"is off by {100 * err:.0f} % (median)") + ". `lmve-plan --bundle BUNDLE --add N` proposes the "
            "N positions to survey next; `GET /model/survey-map` serves the map as GeoJSON.")


def write_report(out_dir: Path, dataset_info: dict, metrics: dict, coverage: float, manifest: dict,
                 timings: dict, stages: dict | None = None, survey_map: dict | None = None) -> None:
    """``OUT/metrics.json`` (the metrics, timings and ``stages``: seconds and peak MiB per stage) and
    ``OUT/report.md`` (the run in words, the centre's candidates, the metrics, the survey map when
    ``survey_map``, its accuracy, is given, where the time went)."""
    out_dir = Path(out_dir)
    (out_dir / "metrics.json").write_text(json.dumps(
        {"dataset": dataset_info, "coverage": coverage, "metrics": metrics, "timings_seconds": timings,
         "stages": stages or {}, "bundle_id": manifest.get("bundle_id")}, indent=2))
    lmve = manifest.get("methods", {}).get("lmve", {}).get("params", {})
    part = part_words(manifest.get("calibration", {}))
    lines = [f"# lmve training report: {dataset_info['name']}", "",
             f"- rows {dataset_info['rows']}, d = {dataset_info['d']}, n = {dataset_info['n']}, "
             f"data sha256 `{dataset_info['sha256'][:16]}...`",
             f"- target coverage {coverage}; bundle `{manifest.get('bundle_id')}`",
             f"- grouping: {_grouping(manifest.get('calibration', {}))}",
             f"- guarantee: {manifest.get('calibration', {}).get('guarantee', 'not recorded')}",
             *([f"- few groups: {manifest['calibration']['split_adjustment']['words']}"]
               if manifest.get("calibration", {}).get("split_adjustment") else []),
             *([f"- calibrated across: {across_line(manifest['calibration']['across'])}"]
               if manifest.get("calibration", {}).get("across") else []),
             f"- served: {selection_line(manifest.get('selection') or {})}",
             *[f"- {what}: {line}" for what, line in (("scale", scale_line(manifest.get("calibration", {}).get("scale"))),
                                                      ("survey size", size_line(manifest.get("calibration", {})
                                                                                .get("scale")))) if line],
             f"- centre: {centre_line(manifest.get('training', {}).get('centre'))}",
             f"- RSSI preprocessing: {manifest.get('training', {}).get('preprocess', 'none')}",
             *([f"- when the radio changes: {RADIO_GUARANTEE}"] if manifest.get("radio") else []),
             f"- LMVE configuration: {lmve.get('config')}; {phase_line(lmve.get('history'))}", "",
             "```", metrics_table(metrics, coverage, part), "```", "", f"![{part} regions](test_regions.png)",
             ""]
    lines += [f"## {part.capitalize()} coverage against the target", "",
              *coverage_words(metrics, _units(manifest.get("calibration", {})), part), ""]
    candidates = candidates_table(manifest.get("training", {}).get("centre"))
    if candidates:
        lines += ["## Centre candidates", "", candidates, ""]
    if survey_map:
        lines += ["## Where the regions are large", "", map_words(survey_map), "", "![survey map](survey_map.png)", ""]
    served = selection_table(manifest.get("selection") or {})
    if served:
        lines += ["## Served method", "", served, ""]
    if stages:
        lines += ["## Where the time went", "", stages_table(stages), ""]
    (out_dir / "report.md").write_text("\n".join(lines))
