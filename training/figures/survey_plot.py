"""The survey map as a picture: the training report's ``survey_map.png`` and ``lmve-plan --plot``.

Two panels over the site (:mod:`models.survey_map`): each cell coloured by the expected region area (log scale)
and by the expected centre error, the surveyed positions as dots, the extent's outline; with a plan
(:mod:`models.survey_plan`), its positions numbered in walking order and the walk between them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_survey_map(path: Path, smap, plan=None, target_names=("x", "y"), title: str | None = None) -> None:
    """PNG at ``path``: ``smap`` (:class:`models.survey_map.SurveyMap`) and, when given, ``plan``
    (:class:`models.survey_plan.Plan`), axes named by ``target_names``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import LogNorm, Normalize

    panels = [("expected_area", "expected region area", smap.accuracy["area"])]
    if np.isfinite(smap.expected_error).any():
        panels.append(("expected_error", "expected centre error", smap.accuracy["error"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.0), squeeze=False, sharex=True, sharey=True,
                             layout="constrained")
    rings = smap.corners()
    ring = np.vstack([smap.extent.polygon, smap.extent.polygon[:1]])
    for ax, (field, words, accuracy) in zip(axes[0], panels):
        values = getattr(smap, field)
        ok = np.isfinite(values) & (values > 0)
        lo, hi = (float(values[ok].min()), float(values[ok].max())) if ok.any() else (1.0, 1.0)
        flat = hi <= lo * (1 + 1e-6)  # a global shape: one value everywhere, not rounding noise in colour
        norm = (Normalize(0.9 * lo, 1.1 * hi) if flat else LogNorm(lo, hi) if field == "expected_area"
                else Normalize(lo, hi))
        cells = PolyCollection(rings[ok], array=values[ok], cmap="viridis", norm=norm, edgecolors="none")
        ax.add_collection(cells)
        fig.colorbar(cells, ax=ax, shrink=0.8, label=words + (" (target units squared)" if field == "expected_area"
                                                                else " (target units)"))
        ax.plot(ring[:, 0], ring[:, 1], lw=0.8, color="0.3")
        ax.scatter(smap.positions[:, 0], smap.positions[:, 1], s=9, c="white", edgecolors="k", linewidths=0.5,
                   label="surveyed position", zorder=3)
        if plan is not None:
            _draw_plan(ax, plan)
        err = accuracy.get("median_abs_rel_error")
        ax.set_title(f"{words}, interpolated" + (f": {100 * err:.0f} % median error at positions left out"
                                                 if err is not None else ""), fontsize=9)
        ax.set_xlabel(target_names[0])
        ax.set_aspect("equal")
        ax.autoscale_view()
    axes[0][0].set_ylabel(target_names[1])
    axes[0][0].legend(loc="best", fontsize=7)
    fig.suptitle(title or f"survey map of the served method ({smap.method}): where the regions are large", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw_plan(ax, plan) -> None:
    P = plan.positions
    ax.plot(P[:, 0], P[:, 1], ls="--", lw=1.0, color="tab:red", zorder=4)
    ax.scatter(P[:, 0], P[:, 1], s=70, c="tab:red", zorder=5, label="to survey next (walking order)")
    for i, p in enumerate(P):
        ax.annotate(str(i + 1), p, ha="center", va="center", fontsize=6, color="white", zorder=6)
