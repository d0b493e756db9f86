"""``lmve-train``'s flags: the parser (:func:`build_parser`) and the :class:`~training.pipeline.config.TrainConfig`
they make (:func:`config_from_args`), with the checks of flags that do not go together."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from models import registry
from models.exceptions import InputError
from training.data.datasets import DATASETS
from training.pipeline import METHODS, TrainConfig
from training.pipeline.centre_selection import MIN_SCREEN_ROWS


def csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _screen_rows(text: str) -> int | str:
    if text.strip().lower() == "off":
        return "off"
    try:
        rows = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a row count (at least {MIN_SCREEN_ROWS}) or 'off'; "
                                         f"got {text!r}") from None
    if rows < MIN_SCREEN_ROWS:
        raise argparse.ArgumentTypeError(f"expected a row count of at least {MIN_SCREEN_ROWS} or 'off'; got {rows}")
    return rows


def _tolerance(text: str) -> float | None:
    if text.strip().lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1) (0.02 for 2 %) or 'off'; got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1) (0.02 for 2 %) or 'off'; got {value:g}")
    return value


def _screen_setting(flag: int | str | None) -> int | None:
    """``TrainConfig.centre_screen_rows`` from ``--centre-screen`` (absent: the default)."""
    if flag is None:
        return TrainConfig.centre_screen_rows
    return None if flag == "off" else flag


def build_parser(doc: str) -> argparse.ArgumentParser:
    """The parser of ``lmve-train`` (``doc``: its usage text, the first paragraph the description)."""
    p = argparse.ArgumentParser(prog="lmve-train", description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", choices=DATASETS, default=None, help="a built-in dataset (default: synthetic)")
    src.add_argument("--csv", type=Path, help="your own data: a CSV file (.csv, .csv.gz) or a Parquet file (.parquet)")
    p.add_argument("--targets", type=csv_list, help="with --csv: comma-separated target columns (2 or more)")
    p.add_argument("--features", type=csv_list, help="with --csv: comma-separated feature columns (default: every "
                                                       "other column that is a reading by its values and name: "
                                                       "identifiers, times, device, user, floor and building codes, "
                                                       "constants and text are left out, and said so)")
    p.add_argument("--meta", type=csv_list, default=None, metavar="COL[,COL]",
                   help="with --csv: columns that are never features, kept with each row (as the columns the "
                        "default leaves out are)")
    p.add_argument("--also-features", type=csv_list, default=None, metavar="COL[,COL]",
                   help="with --csv: columns the default left out that are features after all")
    p.add_argument("--coverage", type=float, default=0.9, help="target coverage eta in (0, 1) (default 0.9)")
    p.add_argument("--seed", type=int, default=0, help="split and training seed (default 0)")
    p.add_argument("--out", type=Path, help="output directory (default artifacts/<dataset>)")
    p.add_argument("--device", default="auto", help="LMVE training device: auto, cpu, cuda (default auto)")
    p.add_argument("--methods", type=csv_list, default=list(METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} (GE and NLE are always kept as fallbacks)")
    p.add_argument("--data-dir", type=Path, help="folder of the paper datasets (default $LMVE_DATA_DIR or "
                                                 "../shared/datasets)")
    p.add_argument("--n-samples", type=int, default=2000, help="synthetic: number of rows (default 2000)")
    p.add_argument("--lmve-max-steps", type=int, default=None, help="LMVE: cap on steps per phase")
    p.add_argument("--lmve-batch-size", type=int, default=None, metavar="N",
                   help="LMVE: mini-batch rows (default: full batch up to 4,096 training rows, else 256)")
    p.add_argument("--lmve-grid", choices=("fast", "paper"), default="fast",
                   help="LMVE learning-rate grid: fast {1e-2,1e-3} (default) or the paper's {1e-3,1e-5}")
    p.add_argument("--lmve-loss", choices=("paper", "nll", "volume"), default="paper",
                   help="LMVE train-phase loss: the paper's (default), Gaussian NLL with a Cholesky output, or "
                        "the calibrated volume itself")
    p.add_argument("--learned-centre", action="store_true",
                   help="LMVE learns a correction to the centre jointly with its shape (a mean head starting "
                        "from the fitted centre); its regions are centred on the corrected estimate, with the same "
                        "calibration and guarantee")
    p.add_argument("--centre", choices=("auto", *registry.CENTRES), default=None,
                   help="the centre: auto (default): the candidate of smallest cross-validated error on the train "
                        "part (" + ", ".join(TrainConfig.centre_candidates) + "; group folds with groups); or one of "
                        + "; ".join(f"{c.name}: {c.description}" for c in registry.CENTRES.values()))
    p.add_argument("--centre-criterion", choices=("rmse", "quantile"), default=None,
                   help="with --centre auto: what the chosen candidate minimises over its out-of-fold Euclidean "
                        "errors: rmse (default), or quantile, the error at the --coverage level, the distance a "
                        "region must reach, on which heavy tails (a fingerprint's wrong floor) weigh less")
    p.add_argument("--centre-candidates", type=csv_list, default=None, metavar="NAME,NAME",
                   help="with --centre auto: the candidates to choose from (default "
                        + ",".join(TrainConfig.centre_candidates) + "; add mlp for the network, the slowest "
                        "candidate: one network fit per fold and one on all rows, and stack for the blend of the "
                        "others, which costs no fit)")
    p.add_argument("--centre-columns", type=csv_list, default=None, metavar="EST_X,EST_Y",
                   help="with --csv: columns holding your own position estimate of each row (one per target, in "
                        "target units). The shapes and calibration learn from the residuals of your estimates; the "
                        "bundle then needs `centers` in every request")
    p.add_argument("--not-detected", type=float, default=None, metavar="VALUE",
                   help="the code of a transmitter not heard in RSSI columns (default: detected, any value outside "
                        "-120..0 dBm, e.g. +100 or -200)")
    p.add_argument("--rssi-floor", type=float, default=None, metavar="DBM",
                   help="the value 'not detected' becomes (default: 5 dB below the weakest real reading)")
    p.add_argument("--rssi-representation", default="auto",
                   choices=("auto", "dbm", "relative", "powed", "exponential"),
                   help="how RSSI readings reach the models: dbm as read; relative: minus each reading's strongest "
                        "transmitter (a phone's gain offset cancels); powed/exponential: weak readings count less. "
                        "auto (default): relative with --calibrate-across, else dbm")
    p.add_argument("--no-rssi", action="store_true",
                   help="no RSSI preprocessing (by default, columns that look like RSSI get their 'not detected' "
                        "codes mapped to a floor)")
    p.add_argument("--groups", default=None, metavar="COL[,COL]",
                   help="columns whose values label each row's group (a surveyed position, a patient, a device; "
                        "any type, the targets too): test and calibration then hold whole groups and the "
                        "guarantee is for rows from new groups. Default: by position when most rows share their "
                        "position with another row; 'none' keeps the paper's row protocol")
    p.add_argument("--calibration", choices=("auto", "split", "cross-fit"), default="auto",
                   help="with groups (positions): how the calibration scores are drawn. split: positions held out "
                        "of training score the served model (exact, P >= level); cross-fit: every training position "
                        "is scored by a centre and shapes fitted without it and the served model trains on all "
                        "(approximate; far more positions calibrate and train). auto (default): cross-fit when a "
                        "split would calibrate on fewer than 30 positions (docs/guides/guarantee.md)")
    p.add_argument("--calibrate-for", choices=("survey", "site"), default="survey",
                   help="a survey grouped by position: whom the guarantee is for. survey (default): a reading at a "
                        "new position drawn as the surveyed ones were; site: a reading at a position uniform over "
                        "the site, each calibration position weighted by the share of the site nearest it "
                        "(approximate; for a survey extended by lmve-plan where its regions were large)")
    p.add_argument("--site-boundary", type=Path, default=None, metavar="FILE",
                   help="with --calibrate-for site: the site's polygon in target coordinates (a GeoJSON Polygon, or "
                        "a CSV of its vertices with the target columns); default: the surveyed positions' convex "
                        "hull widened by half their spacing")
    p.add_argument("--group-rule", choices=("subsample", "pooled"), default="subsample",
                   help="with groups: one calibration score per group drawn at random (subsample, default: P >= "
                        "coverage at new groups, exactly) or every score with each group weighted equally (pooled: "
                        "smaller regions, an asymptotic guarantee only)")
    p.add_argument("--calibrate-across", type=csv_list, default=None, metavar="COL[,COL]",
                   help="per-row label columns (phones, users, days: PHONEID, USERID on UJIIndoorLoc; with --csv, "
                        "any columns of the file, never features) whose units the test part holds out of training, "
                        "with every row sharing one of their values (and, when grouping by position, their "
                        "positions), and whose calibration scores come from models that never saw the unit (see "
                        "--across-mode): the scores then carry a new phone's or user's shift and the guarantee is "
                        "for a new unit, exact or approximate as the report says")
    p.add_argument("--across-mode", choices=("cross-fit", "held-out"), default="cross-fit",
                   help="with --calibrate-across: cross-fit (default) scores every training unit at positions out "
                        "of training by a model fitted without it (unit folds, cross-conformal: all units calibrate, "
                        "approximate); held-out calibrates on units held out of training altogether (exact with 9 "
                        "or more at 0.9, but each one leaves training)")
    p.add_argument("--cross-fit", type=int, default=None, metavar="K",
                   help="shapes learn from K-fold out-of-fold centre residuals (K >= 2; 0: the centre's in-sample "
                        "residuals, the paper). Default 5 with --centre auto (the selection's folds, no extra "
                        "fit) or with groups (group folds), else 0; the served centre is still fitted on all "
                        "training rows")
    p.add_argument("--centre-screen", type=_screen_rows, default=None, metavar="ROWS|off",
                   help="with --centre auto on a train part above ROWS rows (default 5000): every candidate is "
                        "first fitted on ROWS rows of one fold and dropped when more than 25 %% behind the best, "
                        "then the survivors race fold by fold on all rows, dropped when more than 10 %% behind; "
                        "the report and manifest say what each was fitted on and why it was dropped. off: every "
                        "candidate on every fold, whatever the size")
    p.add_argument("--primary", default="auto", metavar="auto|NAME",
                   help="the method the plain routes serve: auto (default): the ellipsoid method whose regions are "
                        "smallest at their own level on held-out rows (the train part cross-fitted, see "
                        "--primary-folds, and the test part), a choice that reads no calibration row, so the "
                        "guarantee stays exact; the fallbacks follow the same ranking. Or a method's name (lmve, "
                        "nle, ge) to force it")
    p.add_argument("--primary-folds", type=int, default=3, metavar="K",
                   help="folds of the train part whose out-of-fold rows join the test part in that choice (default "
                        "3; each costs one more fit of every ellipsoid method, LMVE's the longest); 0: the test part "
                        "alone")
    p.add_argument("--primary-tolerance", type=_tolerance, default=TrainConfig.primary_tolerance,
                   metavar="SHARE|off",
                   help="the cross-fit of that choice stops, fold by fold, once the leading method's expected volume "
                        "is within this share of the smallest with 95 %% confidence on the held-out rows so far "
                        "(default 0.05; a large test part often settles it before any fold). off: every fold")
    p.add_argument("--floor-column", metavar="COL", default=None,
                   help="the label column of each row's floor (FLOOR on UJIIndoorLoc, floor on --dataset floors; "
                        "with --csv any column, never a feature): the bundle then answers a set of floors beside "
                        "each ellipse, with P[true floor in the set and true position in the ellipse] >= coverage "
                        "from one joint calibration")
    p.add_argument("--building-column", metavar="COL", default=None,
                   help="with --floor-column: the column of each row's building (BUILDINGID); the floors are then "
                        "(building, floor) pairs")
    p.add_argument("--floor-classifier", choices=("auto", "knn", "logistic"), default="auto",
                   help="with --floor-column: the floor classifier, auto (default: the one of smallest "
                        "cross-validated Brier score on the train part), knn or logistic")
    p.add_argument("--crs", metavar="EPSG:XXXX|none", default=None,
                   help="the coordinate reference system of the targets, a projected one (EPSG:3857 for "
                        "UJIIndoorLoc, whose built-in loader declares it; a UTM zone): map clients then get "
                        "WGS84 polygons and ground metres (Accept: application/geo+json). none: no CRS")
    p.add_argument("--crs-axes", choices=("xy", "yx"), default=None,
                   help="with --crs: xy (default): the first target is the easting, the second the northing; yx: "
                        "the other way round (UJIIndoorLoc's built-in loader: latitude first)")
    p.add_argument("--crs-scale", type=float, default=None, metavar="UNITS",
                   help="with --crs: CRS units per target unit (default 1; 1000 for UJIIndoorLoc's built-in "
                        "loader, whose targets are kilometres)")
    p.add_argument("--split-by", metavar="COL", default=None,
                   help="one model per value of the label column COL (a building, a site), each trained alone and "
                        "written as OUT/<COL>=<value>/ (a bundle), with OUT/repository.json: a model repository for "
                        "lmve-serve --model-repository OUT (with --csv, COL is never a feature)")
    p.add_argument("--split-names", metavar="VALUE=NAME,...", default=None,
                   help="with --split-by: model names instead of <COL>=<value>, e.g. 0=west,1=east")
    p.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="with --split-by: local: the models one after the other here; dask: one model a task on a "
                        "Dask cluster (the workers read the data from the same path and need the same lmve)")
    p.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="with --engine dask: a Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: a local cluster)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="with --engine dask: worker processes of the local cluster (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _site_boundary(args):
    """``--site-boundary`` read (in target coordinates: a GeoJSON Polygon, or a CSV of vertices), or None."""
    if args.site_boundary is None:
        return None
    if args.calibrate_for != "site":
        raise InputError("--site-boundary is the site of --calibrate-for site", field="--site-boundary",
                         expected="--calibrate-for site", received=f"--calibrate-for {args.calibrate_for}")
    from training.commands.positions import read_polygon

    return read_polygon(args.site_boundary, args.targets)


def config_from_args(args) -> TrainConfig:
    """The :class:`~training.pipeline.config.TrainConfig` of parsed flags, checked
    (:func:`~training.pipeline.config.check_config`, before any data is read); an :class:`InputError` naming the
    flag when two do not go together or a value is refused. Flags only map to fields here: what the run decides
    (the fallbacks fitted, the projection, the grouping) ``train()`` decides."""
    from models.shapes.lmve import PAPER_GRID
    from training.pipeline.config import check_config

    lmve_params = {}
    if args.lmve_grid == "paper":
        lmve_params.update({k: v for k, v in PAPER_GRID.items() if k != "max_steps"})
    if args.lmve_max_steps is not None:
        lmve_params["max_steps"] = args.lmve_max_steps
    if args.lmve_batch_size is not None:
        lmve_params["batch_size"] = args.lmve_batch_size
    if args.lmve_loss != "paper":
        lmve_params["loss"] = args.lmve_loss
    if args.learned_centre:
        lmve_params["mean_head"] = True
    config = TrainConfig(coverage=args.coverage, seed=args.seed, methods=tuple(args.methods), device=args.device,
                         method_params={"lmve": lmve_params}, centre=args.centre or "auto", progress=not args.quiet,
                         cross_fit=args.cross_fit, use_groups=args.groups != "none",
                         calibration_mode=args.calibration, calibrate_for=args.calibrate_for,
                         site_boundary=_site_boundary(args),
                         calibration=None if args.group_rule == "subsample" else "group-pooled",
                         rssi="off" if args.no_rssi else "auto", not_detected=args.not_detected,
                         rssi_floor=args.rssi_floor, rssi_representation=args.rssi_representation,
                         primary=args.primary, primary_folds=args.primary_folds,
                         primary_tolerance=args.primary_tolerance,
                         centre_screen_rows=_screen_setting(args.centre_screen),
                         calibrate_across=tuple(args.calibrate_across or ()), across_mode=args.across_mode,
                         floor_column=args.floor_column, building_column=args.building_column,
                         floor_classifier=args.floor_classifier, crs=args.crs or "dataset", crs_axes=args.crs_axes,
                         crs_scale=args.crs_scale,
                         **({"centre_candidates": tuple(args.centre_candidates)} if args.centre_candidates else {}),
                         **({"centre_criterion": args.centre_criterion} if args.centre_criterion else {}))
    for flag, given in (("--centre-criterion", args.centre_criterion), ("--centre-candidates", args.centre_candidates),
                        ("--centre-screen", args.centre_screen)):
        if given and args.centre not in (None, "auto"):
            raise InputError(f"{flag} is for --centre auto; --centre names one centre",
                             field=flag, expected="--centre auto", received=f"--centre {args.centre}")
    if args.no_rssi and (args.not_detected is not None or args.rssi_floor is not None
                         or args.rssi_representation != "auto"):
        raise InputError("--no-rssi turns the RSSI step off; --not-detected/--rssi-floor/--rssi-representation "
                         "configure it: give one or the other", field="--no-rssi", expected="--no-rssi alone",
                         received="both")
    _check_engine(args)
    if args.centre_columns and args.centre is not None:
        raise InputError("--centre-columns makes your estimates the centre; leave --centre out",
                         field="--centre", expected="no --centre with --centre-columns", received=args.centre)
    try:
        check_config(config)
    except InputError as exc:  # the field as the flag that sets it
        raise as_flag(exc) from None
    return config


#: TrainConfig fields -> the lmve-train flag that sets them, for the messages of the configuration's checks
FLAGS = {"methods": "--methods", "centre": "--centre", "centre_candidates": "--centre-candidates",
         "centre_criterion": "--centre-criterion", "centre_screen_rows": "--centre-screen",
         "calibration_mode": "--calibration", "calibrate_for": "--calibrate-for", "primary": "--primary",
         "primary_folds": "--primary-folds", "primary_tolerance": "--primary-tolerance", "crs": "--crs",
         "crs_axes": "--crs-axes", "crs_scale": "--crs-scale"}
#: the fields of FLAGS that are identifiers no prose uses (an underscore): named as their flags anywhere in a message
_NAMED = re.compile(r"(?<![\w-])(" + "|".join(sorted((k for k in FLAGS if "_" in k), key=len, reverse=True)) + r")(?![\w-])")


def as_flag(exc: InputError) -> InputError:
    """A configuration error naming the flag that sets its field (:data:`FLAGS`): the field that begins the message
    and every other field of the table written with an underscore; other errors as they are."""
    flag = FLAGS.get(exc.field)
    if flag is None:
        return exc
    message = str(exc)
    message = flag + message[len(exc.field):] if message.startswith(exc.field) else f"{flag}: {message}"
    return InputError(_NAMED.sub(lambda m: FLAGS[m.group(1)], message), field=flag, expected=exc.expected,
                      received=exc.received)


def _check_engine(args) -> None:
    """``--engine``, ``--scheduler`` and ``--workers`` go together and with ``--split-by``."""
    if args.engine == "dask" and not args.split_by:
        raise InputError("--engine dask trains the models of --split-by on a cluster; name the column to split by",
                         field="--engine", expected="--split-by COL with --engine dask", received="no --split-by")
    for flag, given in (("--scheduler", args.scheduler), ("--workers", args.workers)):
        if given is not None and args.engine != "dask":
            raise InputError(f"{flag} is for --engine dask", field=flag, expected="--engine dask",
                             received=f"--engine {args.engine}")
    if args.scheduler is not None and args.workers is not None:
        raise InputError("--workers sizes a local cluster; a --scheduler's cluster has its own workers",
                         field="--workers", expected="--scheduler or --workers", received="both")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be at least 1; got {args.workers}", field="--workers",
                         expected="an integer >= 1", received=str(args.workers))
