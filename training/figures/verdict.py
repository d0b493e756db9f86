"""The verdict on a walk's figures (:func:`training.figures.walk.evaluate`'s): it holds when nothing is short, not
the coverage at the level, not a level of the reliability curve, not a group at the level or along its curve."""

from __future__ import annotations

import numpy as np

from training.figures.coverage import TEST_SIZE



def min_fresh(level: float) -> int:
    """The fewest calibration rows (or groups) that attain ``level``: ``m / (m + 1) >= level``."""
    return int(np.ceil(level / (1.0 - level) - 1e-9))


def _levels(levels: list[float]) -> str:
    return ", ".join(f"{v:g}" for v in levels)


def _group_words(name: str, v: str, s: dict, level: float) -> str:
    """One failing group in words: its coverage at the level when that is short, and its short levels."""
    parts = []
    if not s["holds_level"]:
        parts.append(f"{100 * s['coverage']:.1f} % at {level:g}")
    if s["short_levels"]:
        parts.append(f"short at {_levels(s['short_levels'])}")
    return f"{name} {v} ({'; '.join(parts)})"


def verdict(figures: dict, model) -> dict:
    """Whether nothing is short (the module's verdict), in words, and what to do when something is."""
    level, cov, (lo, hi), p = figures["level"], figures["coverage"], figures["coverage_interval"], figures["p_value"]
    counted = figures.get("interval_units") or {"unit": "rows", "n": figures["n_rows"]}
    over = f"{counted['n']} {counted['unit']}" if counted["unit"] == "rows" else \
        f"{counted['n']} {counted['unit']} ({figures['n_rows']} rows)"
    headline = bool(p >= TEST_SIZE)
    short = figures.get("short_levels") or []
    failing = {name: [v for v, s in per.items() if not s["holds"]] for name, per in figures["groups"].items()}
    failing = {k: v for k, v in failing.items() if v}
    outliers = figures.get("error_outliers") or {}
    holds = headline and not short and not failing
    stated = (f"coverage {100 * cov:.1f} % (95 % interval {100 * lo:.1f}-{100 * hi:.1f} %) over {over} against "
              f"the {100 * level:g} % level")
    if headline:
        words = f"Coverage holds at the level: {stated} is within its binomial tolerance (one-sided p = {p:.3g})."
    else:
        words = (f"Coverage fails: {stated} is below the level beyond its binomial tolerance (one-sided p = {p:.2g}): these "
                 "rows are not like the calibration rows (a new phone, a new day, a changed site).")
    problems = []
    if short:
        at = {r["level"]: r for r in figures["reliability"]}
        problems.append(f"the walk's reliability curve is short at {_levels(short)} ("
                        + ", ".join(f"{100 * at[v]['coverage']:.1f} % at {v:g}" for v in short[:4])
                        + (", ..." if len(short) > 4 else "") + "), beyond chance over its levels")
    if failing:
        problems.append("groups short: " + "; ".join(
            "; ".join(_group_words(name, v, figures["groups"][name][v], level) for v in values[:8])
            + (" ..." if len(values) > 8 else "") for name, values in failing.items()))
    if problems:
        text = "; ".join(problems)
        words += (" But the verdict fails: " + text if headline else " " + text[0].upper() + text[1:]) + "."
    if outliers:
        words += " Errors far above the rest's: " + "; ".join(
            f"{name} {o['group']} (median {o['median']:.3g} against {o['rest_median']:.3g})"
            for name, found in outliers.items() for o in found) + ": regions that hold there hold by being large."
    if holds:
        words += " Nothing is short: no level of the curve" + (" and no group" if figures["groups"] else "") + "."
        if lo > level and cov > level + 0.05:
            words += (" The regions are larger than the level needs on this walk; a recalibration on rows like it "
                      "would shrink them.")
    advice = None
    need = min_fresh(level)
    columns = ",".join(f"<a day column of {c[4:]}>" if c.startswith("day:") else c for c in failing)
    if not holds:
        advice = (f"Recalibrate with labelled rows like these (half of this walk, say): `lmve-recalibrate BUNDLE "
                  f"part.csv --out NEW` ({need} rows, or positions where readings repeat them, attain the level; 200 "
                  "or more keep the new threshold's own spread near 2 points), then evaluate NEW on the rest of the "
                  "walk (docs/guides/validate.md).")
        if failing:
            advice += (f" Include rows of the groups short of the level; to guarantee each {columns} value rather "
                       f"than the rows as a whole, train with `lmve-train --calibrate-across {columns}`.")
    return {"holds": holds, "holds_at_level": headline, "words": words, "advice": advice, "short_levels": short,
            "failing_groups": failing}
