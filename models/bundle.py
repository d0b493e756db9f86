"""The calibrated bundle: a directory with a manifest beside plain array files.

Layout (schema version 2)::

    bundle/
      manifest.json     schema version, versions, dataset, dims, coverage, the centre's and every
                        method's parameters, alpha_q per method, test metrics, provenance, the
                        served method's selection (the plain routes' order), and the sha256 of
                        every other file
      preprocess.npz    (optional) the fitted preprocessing step (RSSI columns: which ones)
      scaler.npz        mean, scale
      centre.npz        the centre's arrays (SVR: support vectors, dual coefficients, intercepts)
      calibration.npz   the sorted calibration scores of every method
      <method>.npz      each method's arrays (LMVE: its layers' weights, input box and floor)
      floors.npz        (optional, ``lmve-train --floor-column``) the floor classifier's arrays, its labels,
                        and per method the joint calibration's map and scores (:mod:`models.floors`);
                        the manifest's ``floors`` names the columns, the classifier and the guarantee
      survey.npz        (optional) the surveyed positions and a few held-out rows, for the viewer
                        (:mod:`models.survey`); the manifest's ``survey`` counts them
      typicality.npz    (optional) the queries' typicality step (:mod:`models.typicality`)
      readings.npz      (optional) what the survey saw of each feature: RSSI or not, its weakest and
                        strongest reading, its not-detected code and what a missing reading becomes
                        (:mod:`models.readings`)
      radio.npz         (optional) the radio map: the survey's rows as read (:mod:`models.radio_map`)

The manifest's optional ``crs`` declares the targets' coordinate reference system (:mod:`models.geo`).

Every file is a numpy ``.npz`` read with ``allow_pickle=False``: no file is unpickled, and nothing
is read before its sha256 matches the manifest. Each method and centre saves and loads itself
(``to_arrays``/``from_arrays``), found through :mod:`models.registry`. Schema 1 bundles (LMVE as a
torch file) are refused with the command that converts them (``lmve-convert-bundle``). Writing is
atomic: files go to a temporary sibling directory, which replaces the target by rename only once
complete, so a crash never leaves a half bundle where a good one was. Loading raises
:class:`~models.exceptions.BundleError` naming the file at fault.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from models import registry
from models.calibration.conformal import SplitConformalCalibrator
from models.recalibration import Recalibration
from models.exceptions import BundleError, InputError
from models.floors import FloorModel
from models.geo import TargetCRS
from models.model import RegionModel
from models.predictor import SplitConformalRegressor
from models.preprocessing import RSSIFloor
from models.radio_map import RadioMap
from models.readings import ReadingRanges
from models.typicality import Typicality
from models.survey import Survey

SCHEMA_VERSION = 2
MANIFEST = "manifest.json"
#: a model repository's manifest (``lmve-train --split-by`` writes it; ``lmve-serve --model-repository`` reads it)
REPOSITORY_MANIFEST = "repository.json"
CONVERT_HINT = "convert it with `lmve-convert-bundle {path} NEW_DIR` (part of the training install, which has torch)"


def sha256_bytes(data: bytes) -> str:
    """The SHA-256 a manifest records for a file.

    Parameters
    ----------
    data : bytes
        The file's bytes.

    Returns
    -------
    str
        Hexadecimal digest.
    """
    return hashlib.sha256(data).hexdigest()


def npz_bytes(arrays: dict) -> bytes:
    """Arrays as the bytes of an uncompressed ``.npz`` file.

    Parameters
    ----------
    arrays : dict of str -> array-like
        The arrays by name.

    Returns
    -------
    bytes
    """
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _versions() -> dict:
    import sklearn

    return {"lmve": _version("lmve") or "unknown", "python": platform.python_version(), "numpy": np.__version__,
            "scikit-learn": sklearn.__version__, "torch": _version("torch")}


def _json_float(x: float):
    return None if not np.isfinite(x) else float(x)


# ----------------------------------------------------------------------------- write
def save_bundle(model: RegionModel, path, *, dataset: dict | None = None, metrics: dict | None = None,
                training: dict | None = None, calibration: dict | None = None) -> dict:
    """Write a model to a directory atomically.

    Every file is written to a temporary directory beside ``path`` and renamed into place at the end,
    so a failure leaves no partial bundle; the manifest records each file's SHA-256.

    Parameters
    ----------
    model : RegionModel
        Conformalized.
    path : str or path-like
        The bundle directory; replaced if it exists.
    dataset : dict, default=None
        Provenance: name, sha256, rows.
    metrics : dict, default=None
        Test figures.
    training : dict, default=None
        How the bundle was trained.
    calibration : dict, default=None
        The grouping and the guarantee in words; joins the calibration rule and counts.

    Returns
    -------
    dict
        The manifest written to ``manifest.json``.

    Raises
    ------
    BundleError
        The model's centre is of a type the registry cannot store.
    """
    centre = model.centre
    if type(centre).__name__ not in registry.CENTRE_TYPES:
        raise BundleError(f"centre {type(centre).__name__} cannot be stored; the registry knows "
                          f"{', '.join(registry.CENTRE_TYPES)}")
    centre_params, centre_arrays = centre.to_arrays()
    files = {"scaler.npz": npz_bytes({"mean": model.scaler_mean, "scale": model.scaler_scale}),
             "centre.npz": npz_bytes(centre_arrays)}
    methods = _method_files(model, files)
    parts = _optional_parts(model, files)
    first = next(iter(model.methods.values())).calibrator_
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": _versions(),
        "dataset": dataset or {},
        "feature_names": list(model.feature_names),
        "target_names": list(model.target_names),
        "d": model.n_features,
        "n": model.n_targets,
        "coverage": model.coverage,
        "preprocess": parts.pop("preprocess", None),
        "centre": {"type": type(centre).__name__, "params": centre_params, "file": "centre.npz"},
        "methods": methods,
        "calibration": {**(calibration or {}), "rule": first.rule, "n_rows": first.n_rows_,
                        "n_calibration": first.n_calibration_},
        "metrics": metrics or {},
        "training": training or {},
        "selection": model.selection,
        "files": {name: sha256_bytes(data) for name, data in sorted(files.items())},
        **parts,
    }
    if model.crs is not None:
        manifest["crs"] = model.crs.to_manifest()
    manifest["bundle_id"] = sha256_bytes(json.dumps(manifest["files"], sort_keys=True).encode())[:16]
    files[MANIFEST] = json.dumps(manifest, indent=2, sort_keys=True).encode()
    write_atomic(Path(path), files)
    model.manifest = manifest
    return manifest


def _method_files(model: RegionModel, files: dict) -> dict:
    """Each method's arrays and the calibration scores added to ``files``; the manifest's ``methods``."""
    methods, scores = {}, {}
    for name, reg in model.methods.items():
        spec = registry.method(name)
        params, arrays = reg.shape_.to_arrays()
        methods[name] = {"file": spec.file, "kind": spec.kind, "params": params, "alpha_q": _json_float(reg.alpha_q_),
                         "n_calibration": reg.calibrator_.n_calibration_}
        files[spec.file] = npz_bytes(arrays)
    for name, reg in model.methods.items():
        scores[name] = reg.calibrator_.scores_
        if reg.calibrator_.weights_ is not None:
            scores[f"{name}__weights"] = reg.calibrator_.weights_
    files["calibration.npz"] = npz_bytes(scores)
    return methods


def _optional_parts(model: RegionModel, files: dict) -> dict:
    """The parts a model may lack (RSSI step, floors, survey, typicality, reading ranges): their arrays added
    to ``files``, their manifest entries returned by key (absent parts absent)."""
    parts = {}
    if model.preprocess is not None:
        params, arrays = model.preprocess.to_arrays()
        files["preprocess.npz"] = npz_bytes(arrays)
        parts["preprocess"] = {"type": type(model.preprocess).__name__, "params": params, "file": "preprocess.npz",
                               "description": model.preprocess.describe()}
    if model.floors is not None:
        params, arrays = model.floors.to_arrays()
        files["floors.npz"] = npz_bytes(arrays)
        parts["floors"] = {**params, "file": "floors.npz", "guarantee": floor_guarantee(model)}
    if model.survey is not None:
        info, arrays = model.survey.to_arrays()
        files["survey.npz"] = npz_bytes(arrays)
        parts["survey"] = {**info, "file": "survey.npz"}
    if model.typicality is not None:
        params, arrays = model.typicality.to_arrays()
        files["typicality.npz"] = npz_bytes(arrays)
        parts["typicality"] = {"params": params, "file": "typicality.npz",
                               "n_calibration": int(len(model.typicality.calibration_))}
    if model.readings is not None:
        params, arrays = model.readings.to_arrays()
        files["readings.npz"] = npz_bytes(arrays)
        parts["readings"] = {"params": params, "file": "readings.npz", "rssi_features": model.readings.n_rssi}
    if model.radio_map is not None:
        info, arrays = model.radio_map.to_arrays()
        files["radio.npz"] = npz_bytes(arrays)
        parts["radio"] = {**info, "file": "radio.npz"}
    return parts


def floor_guarantee(model: RegionModel) -> str:
    """A floor bundle's guarantee in words, as its manifest states it.

    Parameters
    ----------
    model : RegionModel
        A model with floors.

    Returns
    -------
    str
        ``P[true floor in floors and true position in the ellipse] >= coverage``, for a new row or a row of a
        new group.
    """
    labels = model.floors.labels
    what = " and ".join(labels.columns)
    return (f"P[true {what} in `floors` and true position in the ellipse] >= coverage, for a new "
            f"{'row' if next(iter(model.floors.joint.values())).calibrator.rule == 'rows' else 'row of a new group'}: "
            "floors and ellipse calibrated together on one joint score (models.floors)")


def save_recalibrated(parent: RegionModel, result: Recalibration, out) -> dict:
    """Write a recalibration as a bundle, atomically.

    Parameters
    ----------
    parent : RegionModel
        The model recalibrated: its dataset's provenance carries over.
    result : Recalibration
        What :func:`models.recalibration.recalibrate` returned.
    out : str or path-like
        The new bundle's directory.

    Returns
    -------
    dict
        The manifest written.
    """
    return save_bundle(result.model, Path(out), dataset=parent.manifest.get("dataset"), metrics={},
                       training=result.training, calibration=result.calibration)


def write_atomic(path: Path, files: dict[str, bytes]) -> None:
    """Write files into a temporary sibling of a directory, then rename it into place.

    A failure at any point removes the temporary directory and leaves ``path`` as it was.

    Parameters
    ----------
    path : Path
        The directory to write; an existing one is replaced.
    files : dict of str -> bytes
        File names and contents.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if path.exists():
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write one file through a temporary sibling, flushed to disk, then renamed over ``path``.

    A failure at any point removes the temporary file and leaves ``path`` as it was.

    Parameters
    ----------
    path : Path
        The file to write (its folder is made); an existing one is replaced.
    data : bytes
        The file's contents.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------------ read
def read_manifest(path, schema_version: int = SCHEMA_VERSION) -> dict:
    """Read and check a bundle's ``manifest.json``.

    Parameters
    ----------
    path : str or path-like
        The bundle directory.
    schema_version : int, default=SCHEMA_VERSION
        The schema this lmve reads.

    Returns
    -------
    dict
        The manifest.

    Raises
    ------
    BundleError
        No manifest, not JSON, another schema version, or a required key missing.
    """
    path = Path(path)
    mpath = path / MANIFEST
    try:
        is_dir = path.is_dir()
    except OSError as exc:  # a name the file system refuses (too long, a NUL): no such bundle
        raise BundleError(f"bundle directory {str(path)[:200]!r} cannot be read: {exc.strerror}",
                          path=str(path)[:200]) from None
    if not is_dir:
        raise BundleError(f"bundle directory {path} does not exist", path=str(path))
    if not mpath.is_file():
        raise BundleError(f"{mpath} is missing: {path} is not a bundle", path=str(mpath))
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{mpath} is not valid JSON: {exc}", path=str(mpath)) from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{mpath} must hold a JSON object", path=str(mpath))
    version = manifest.get("schema_version")
    if version == 1 and schema_version != 1:
        raise BundleError(f"{mpath} has schema_version 1, which stores the LMVE network as a torch file that "
                          f"serving does not read; this lmve reads schema_version {schema_version}: "
                          + CONVERT_HINT.format(path=path), path=str(mpath))
    if version != schema_version:
        raise BundleError(f"{mpath} has schema_version {version!r}; this lmve reads schema_version {schema_version}",
                          path=str(mpath))
    for key in ("files", "methods", "feature_names", "target_names", "coverage", "centre"):
        if key not in manifest:
            raise BundleError(f"{mpath} lacks the required key {key!r}", path=str(mpath))
    return manifest


def verified_files(path, manifest: dict) -> dict[str, bytes]:
    """Read every file a manifest lists and check its SHA-256 before anything is deserialised.

    Parameters
    ----------
    path : str or path-like
        The bundle directory.
    manifest : dict
        Its manifest.

    Returns
    -------
    dict of str -> bytes
        The files' contents by name.

    Raises
    ------
    BundleError
        An unsafe file name, a file missing, or a digest that differs from the manifest's.
    """
    path = Path(path)
    out = {}
    for name, digest in manifest["files"].items():
        if "/" in name or "\\" in name or name.startswith("."):
            raise BundleError(f"manifest lists an unsafe file name {name!r}", path=str(path / MANIFEST))
        fpath = path / name
        if not fpath.is_file():
            raise BundleError(f"{fpath} is listed in the manifest but missing", path=str(fpath))
        data = fpath.read_bytes()
        actual = sha256_bytes(data)
        if actual != digest:
            raise BundleError(f"{fpath} does not match the manifest (sha256 {actual[:12]}..., expected "
                              f"{digest[:12]}...): the file was modified or corrupted", path=str(fpath))
        out[name] = data
    return out


def read_npz(data: bytes, name: str, path: Path) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file's bytes, without unpickling anything.

    Parameters
    ----------
    data : bytes
        The file's bytes.
    name : str
        Its name in the bundle, for the error.
    path : Path
        The bundle directory, for the error.

    Returns
    -------
    dict of str -> ndarray

    Raises
    ------
    BundleError
        The bytes are not a readable array file.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:
        raise BundleError(f"{path / name} is not a readable array file: {exc}", path=str(path / name)) from None


def load_bundle(path) -> RegionModel:
    """Verify and load a bundle directory.

    Parameters
    ----------
    path : str or path-like
        The bundle directory.

    Returns
    -------
    RegionModel
        With the bundle's manifest.

    Raises
    ------
    BundleError
        No manifest, an unknown schema, a file missing or whose SHA-256 differs from the manifest's, an
        unknown centre, method or preprocessing type, or arrays inconsistent with the manifest.
    """
    path = Path(path)
    manifest = read_manifest(path)
    blobs = verified_files(path, manifest)

    def arrays(name):
        if name not in blobs:
            raise BundleError(f"{path / name} is required but not listed in the manifest", path=str(path / name))
        return read_npz(blobs[name], name, path)

    try:
        scaler = arrays("scaler.npz")
        ctype = registry.CENTRE_TYPES.get(manifest["centre"]["type"])
        if ctype is None:
            raise BundleError(f"manifest names an unknown centre type {manifest['centre']['type']!r}",
                              path=str(path / MANIFEST))
        centre = ctype.from_arrays(manifest["centre"]["params"], arrays(manifest["centre"]["file"]))
        preprocess = None
        if manifest.get("preprocess"):
            entry = manifest["preprocess"]
            if entry["type"] != RSSIFloor.__name__:
                raise BundleError(f"manifest names an unknown preprocessing step {entry['type']!r}",
                                  path=str(path / MANIFEST))
            preprocess = RSSIFloor.from_arrays(entry["params"], arrays(entry["file"]))
        coverage = float(manifest["coverage"])
        methods = _load_methods(manifest, arrays, centre, coverage, path)
        extras = _load_extras(manifest, arrays, scaler, methods, path)
    except BundleError:
        raise
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise BundleError(f"bundle {path} is inconsistent with its manifest: {type(exc).__name__}: {exc}",
                          path=str(path)) from None
    return RegionModel(feature_names=list(manifest["feature_names"]), target_names=list(manifest["target_names"]),
                       scaler_mean=scaler["mean"], scaler_scale=scaler["scale"], methods=methods, coverage=coverage,
                       manifest=manifest, preprocess=preprocess, selection=_selection(manifest, path), **extras)


def _load_methods(manifest: dict, arrays, centre, coverage: float, path: Path) -> dict:
    """The calibrated methods the manifest names, each on the shared ``centre``."""
    scores = arrays("calibration.npz")
    methods = {}
    for name, entry in manifest["methods"].items():
        spec = registry.METHODS.get(name)
        if spec is None:
            raise BundleError(f"manifest names an unknown method {name!r}", path=str(path / MANIFEST))
        shape = spec.estimator.from_arrays(entry["params"], arrays(entry["file"]))
        if name not in scores:
            raise BundleError(f"{path / 'calibration.npz'} has no scores for method {name!r}",
                              path=str(path / "calibration.npz"))
        info = manifest.get("calibration", {})
        cal = SplitConformalCalibrator.from_arrays(info.get("rule", "rows"), scores[name],
                                                   scores.get(f"{name}__weights"), entry["n_calibration"],
                                                   info.get("n_rows", len(scores[name])))
        methods[name] = SplitConformalRegressor.from_fitted(centre, shape, cal, coverage)
    return methods


def _load_extras(manifest: dict, arrays, scaler, methods: dict, path: Path) -> dict:
    """The optional parts (``floors``, ``crs``, ``survey``, ``typicality``, ``readings``, ``radio_map``; ``None``
    when the manifest has none), each checked against the rest of the bundle."""
    out = dict.fromkeys(("floors", "crs", "survey", "typicality", "readings", "radio_map"))
    if manifest.get("floors"):
        floors = out["floors"] = FloorModel.from_arrays(manifest["floors"], arrays(manifest["floors"]["file"]))
        unknown = set(floors.joint) - set(methods)
        if unknown:
            raise BundleError(f"{path / MANIFEST}: floors calibrate methods the bundle lacks: {sorted(unknown)}",
                              path=str(path / MANIFEST))
    if manifest.get("crs"):
        try:
            out["crs"] = TargetCRS.from_manifest(manifest["crs"])
        except InputError as exc:
            raise BundleError(f"{path / MANIFEST}: its crs cannot be used: {exc}", path=str(path / MANIFEST)) from None
    if manifest.get("survey"):
        file = manifest["survey"]["file"]
        out["survey"] = Survey.from_arrays(arrays(file), int(manifest["d"]), int(manifest["n"]), str(path / file))
    if manifest.get("typicality"):
        typicality = out["typicality"] = Typicality.from_arrays(manifest["typicality"]["params"],
                                                                arrays(manifest["typicality"]["file"]))
        if typicality.mean_.shape != np.shape(scaler["mean"]):
            raise BundleError(f"{path / manifest['typicality']['file']}: its projection takes "
                              f"{typicality.mean_.shape[0]} features; the bundle's scaler "
                              f"{np.shape(scaler['mean'])[0]}",
                              path=str(path / manifest["typicality"]["file"]))
    if manifest.get("readings"):
        readings = out["readings"] = ReadingRanges.from_arrays(manifest["readings"]["params"],
                                                               arrays(manifest["readings"]["file"]))
        if readings.rssi_.shape != (int(manifest["d"]),):
            raise BundleError(f"{path / manifest['readings']['file']}: it describes {readings.rssi_.shape[0]} "
                              f"features; the bundle has {manifest['d']}", path=str(path / manifest["readings"]["file"]))
    if manifest.get("radio"):
        file = manifest["radio"]["file"]
        out["radio_map"] = RadioMap.from_arrays(arrays(file), int(manifest["d"]), int(manifest["n"]), str(path / file),
                                                knn=manifest["radio"].get("knn"))
    return out


def _selection(manifest: dict, path: Path) -> dict:
    """The manifest's ``selection`` (absent in older bundles: ``{}``, the registry's order), checked:
    its ``order`` must name methods the bundle has."""
    selection = manifest.get("selection") or {}
    order = selection.get("order", []) if isinstance(selection, dict) else None
    if not isinstance(order, list) or any(m not in manifest["methods"] for m in order):
        raise BundleError(f"{path / MANIFEST}: selection.order must list methods of the bundle "
                          f"({', '.join(manifest['methods'])}); got {order!r}", path=str(path / MANIFEST))
    return selection
