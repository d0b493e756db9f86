"""``lmve-plan``: where to survey next, from a bundle alone: N positions in the order to walk them.

    lmve-plan --bundle artifacts/site7/bundle --add 30
    lmve-plan --bundle B --add 20 --candidates reference_points.csv --out next_walk.csv --plot next_walk.png
    lmve-plan --bundle B --add 10 --boundary floor_plan.geojson --geojson next_walk.geojson

The bundle's survey map (where the served regions are large and the centre errs, interpolated from the
surveyed positions) weighs every part of the site; the plan adds, one at a time, the position that covers the
most of that weight not yet covered by the survey, then orders the positions as a walk (``models.survey_plan``).
A position is never proposed outside the site: the surveyed positions' convex hull widened by half their
spacing, or ``--boundary`` (a polygon: GeoJSON, or a CSV of its vertices in order). ``--candidates`` restricts
the plan to positions someone can reach (a CSV; e.g. a building's reference points), each proposal naming its
line there. CSV coordinates are in the bundle's target columns (by name), or ``lon,lat`` (WGS84) when the
bundle declares a CRS; a GeoJSON boundary is WGS84 with a CRS, the targets' plane without.

Writes ``--out`` (CSV: ``order``, the target columns, ``lon,lat`` with a CRS, ``expected_area``,
``expected_error`` (target units), ``gain`` (the share of the map's weight the position covers) and, with
candidates, ``candidate_line``); ``--plot`` draws the map and the walk; ``--geojson`` the same as
``GET /model/survey-map?add=N``. Reads only the bundle: no torch, seconds on a survey of hundreds of positions.
Nothing is written when anything is wrong.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from training import run_command


def build_parser():
    from training.commands.inputs import bundle_parser

    p = bundle_parser("lmve-plan", __doc__)
    p.add_argument("--add", type=int, required=True, help="how many positions to propose")
    p.add_argument("--out", type=Path, default=Path("survey_plan.csv"), help="the plan's CSV (default survey_plan.csv)")
    p.add_argument("--candidates", type=Path, default=None, help="CSV of positions the plan may choose among")
    p.add_argument("--boundary", type=Path, default=None, help="the site's polygon (GeoJSON, or CSV of vertices)")
    p.add_argument("--floor", type=int, default=None, help="a floor bundle: the floor code to plan on (default all)")
    p.add_argument("--cells", type=int, default=40, help="the map's cells along the site's longer side (default 40)")
    p.add_argument("--weight", default="error-area", choices=("error-area", "area", "uniform"),
                   help="what makes a part of the site worth surveying (default error-area: error squared times area)")
    p.add_argument("--seed", type=int, default=0, help="the plan's seed (candidate jitter, ties; default 0)")
    p.add_argument("--plot", type=Path, default=None, help="PNG of the map with the plan drawn")
    p.add_argument("--geojson", type=Path, default=None, help="the map and plan as GeoJSON")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command("lmve-plan", build_parser(), _run, argv, needs=())


def _run(args) -> int:
    from models.bundle import write_file_atomic
    from models.survey_geojson import feature_collection
    from models.survey_map import survey_map
    from models.survey_plan import plan
    from training.commands.inputs import open_model
    from training.commands.positions import read_points, read_polygon

    model = open_model(args.bundle, args.model)
    crs = model.crs
    candidates = None if args.candidates is None else read_points(args.candidates, model, "--candidates")
    boundary = None if args.boundary is None else read_polygon(args.boundary, list(model.target_names), model.crs,
                                                               "--boundary")
    smap = survey_map(model.survey, boundary=boundary, cells=args.cells, floor=args.floor,
                      method=model.primary_method)
    chosen = plan(smap, args.add, candidates=candidates, seed=args.seed, weight=args.weight)
    files = {args.out: plan_csv(chosen, model)}
    if args.geojson:
        files[args.geojson] = json.dumps(feature_collection(smap, crs, chosen)).encode()
    if args.plot:
        from training.figures.survey_plot import plot_survey_map

        buf = io.BytesIO()
        plot_survey_map(buf, smap, chosen, model.target_names, title=f"{len(chosen.positions)} positions to survey "
                        f"next, in walking order ({model.primary_method} regions)")
        files[args.plot] = buf.getvalue()
    for path, data in files.items():
        write_file_atomic(path, data)
    unit = "target units" if crs is None else f"target units ({crs.to_manifest()['unit']} x {crs.scale:g})"
    print(f"{len(chosen.positions)} positions to survey next, walk {chosen.walk_length:.4g} {unit}: they cover "
          f"{100 * chosen.gain.sum():.0f} % of the map's weight the survey leaves uncovered"
          + (f"; {chosen.outside} of {chosen.candidates} candidates lie outside the site" if chosen.outside else ""))
    print("wrote " + ", ".join(str(p) for p in files))
    return 0


def plan_csv(chosen, model) -> bytes:
    """The plan's CSV (see the module's docstring)."""
    names = list(model.target_names)
    header = ["order", *names] + (["lon", "lat"] if model.crs is not None else []) + ["expected_area",
                                                                                    "expected_error", "gain"]
    header += ["candidate_line"] if chosen.index is not None else []
    lonlat = model.crs.to_lonlat(chosen.positions) if model.crs is not None else None
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for i, p in enumerate(chosen.positions):
        row = [i + 1, *(repr(float(v)) for v in p)]
        row += [] if lonlat is None else [f"{lonlat[i, 0]:.8f}", f"{lonlat[i, 1]:.8f}"]
        row += [f"{chosen.expected_area[i]:.6g}", f"{chosen.expected_error[i]:.6g}", f"{chosen.gain[i]:.6g}"]
        row += [] if chosen.index is None else [int(chosen.index[i]) + 2]  # the header is line 1
        w.writerow(row)
    return buf.getvalue().encode()


if __name__ == "__main__":
    sys.exit(main())
