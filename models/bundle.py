"""The calibrated bundle: a directory with a manifest beside plain array files.

Layout (schema version 1)::

    bundle/
      manifest.json     schema version, versions, dataset, dims, coverage, alpha_q per method,
                        test metrics, and the sha256 of every other file
      scaler.npz        mean, scale                      (numpy, allow_pickle=False)
      centre.npz        SVR support vectors, dual coefficients, intercepts, gammas
      calibration.npz   the sorted calibration scores of every method
      ge.npz            GE shape
      nle.npz           NLE reference rows (X, R) and global shape
      lmve.pt           LMVE network state_dict        (torch.load(weights_only=True))
      copula.npz        Copula scale MLP and calibration marginals

Nothing is deserialised before its sha256 matches the manifest, and no file is unpickled at
all. Writing is atomic: files go to a temporary sibling directory, which replaces the target
by rename only once complete, so a crash never leaves a half bundle where a good one was.
Loading raises :class:`~models.exceptions.BundleError` naming the file at fault.
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

from models.centre import SVRCentre
from models.conformal import SplitConformalCalibrator
from models.exceptions import BundleError
from models.model import RegionModel
from models.predictor import SplitConformalRegressor
from models.shapes import EmpiricalCopulaBox, GaussianEllipsoid, LMVEShape, NearestNeighbourEllipsoid

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def _versions() -> dict:
    import sklearn
    import torch

    try:
        from importlib.metadata import version

        lmve_version = version("lmve")
    except Exception:  # pragma: no cover - not installed as a distribution
        lmve_version = "unknown"
    return {"lmve": lmve_version, "python": platform.python_version(), "numpy": np.__version__,
            "scikit-learn": sklearn.__version__, "torch": torch.__version__}


# ----------------------------------------------------------------------------- write
def _serialise_method(name: str, reg: SplitConformalRegressor) -> tuple[dict, dict[str, bytes]]:
    """Return (manifest entry, {filename: bytes}) for one calibrated method."""
    shape = reg.shape_
    entry = {"alpha_q": _json_float(reg.alpha_q_), "n_calibration": reg.calibrator_.n_calibration_,
             "kind": "box" if name == "copula" else "ellipsoid"}
    if isinstance(shape, GaussianEllipsoid):
        return {**entry, "file": "ge.npz"}, {"ge.npz": _npz_bytes(covariance=shape.covariance_)}
    if isinstance(shape, NearestNeighbourEllipsoid):
        entry.update(file="nle.npz", n_neighbors=shape.n_neighbors_, local_weight=float(shape.local_weight))
        return entry, {"nle.npz": _npz_bytes(X_ref=shape.X_ref_, R_ref=shape.R_ref_, global_shape=shape.global_shape_)}
    if isinstance(shape, LMVEShape):
        import torch

        buf = io.BytesIO()
        torch.save(shape.net_.state_dict(), buf)
        cfg = shape.config_
        entry.update(file="lmve.pt", n_layers=shape.n_layers, eps=shape.eps, target_scale=shape.target_scale_,
                     output=shape.net_.output, loss=shape.loss, batch_size=shape.batch_size,
                     config=None if cfg is None else {"lr_init": cfg.lr_init, "lr_train": cfg.lr_train,
                                                      "dropout": cfg.dropout},
                     history=getattr(shape, "history_", None))
        return entry, {"lmve.pt": buf.getvalue()}
    if isinstance(shape, EmpiricalCopulaBox):
        arrays = {"sigma_floor": shape.sigma_floor_, "calibration_marginals": shape.calibration_marginals_}
        arrays.update({f"coef_{i}": W for i, W in enumerate(shape.coefs_)})
        arrays.update({f"intercept_{i}": b for i, b in enumerate(shape.intercepts_)})
        entry.update(file="copula.npz", n_layers=len(shape.coefs_))
        return entry, {"copula.npz": _npz_bytes(**arrays)}
    raise BundleError(f"method {name!r} ({type(shape).__name__}) cannot be stored in a bundle")


def _json_float(x: float):
    return None if not np.isfinite(x) else float(x)


def save_bundle(model: RegionModel, path, *, dataset: dict | None = None, metrics: dict | None = None,
                training: dict | None = None) -> dict:
    """Write ``model`` to the directory ``path`` atomically; return the manifest.

    ``dataset`` (name, sha256, rows), ``metrics`` (test figures) and ``training`` (how the
    bundle was trained: seed, residuals, ...) go into the manifest as provenance.
    """
    path = Path(path)
    files: dict[str, bytes] = {}
    centre = model.centre
    if not isinstance(centre, SVRCentre):
        raise BundleError(f"only SVRCentre can be stored; got {type(centre).__name__}")
    files["scaler.npz"] = _npz_bytes(mean=model.scaler_mean, scale=model.scaler_scale)
    files["centre.npz"] = _npz_bytes(**centre.to_arrays())
    methods = {}
    for name, reg in model.methods.items():
        entry, blobs = _serialise_method(name, reg)
        methods[name] = entry
        files.update(blobs)
    files["calibration.npz"] = _npz_bytes(**{name: reg.calibrator_.scores_ for name, reg in model.methods.items()})
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
        "centre": {"type": "SVRCentre", "params": centre.get_params()},
        "methods": methods,
        "metrics": metrics or {},
        "training": training or {},
        "files": {name: sha256_bytes(data) for name, data in sorted(files.items())},
    }
    manifest["bundle_id"] = sha256_bytes(json.dumps(manifest["files"], sort_keys=True).encode())[:16]
    files[MANIFEST] = json.dumps(manifest, indent=2, sort_keys=True).encode()

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
    model.manifest = manifest
    return manifest


# ------------------------------------------------------------------------------ read
def read_manifest(path) -> dict:
    """Read and check ``manifest.json`` (existence, JSON, schema version, required keys)."""
    path = Path(path)
    mpath = path / MANIFEST
    if not path.is_dir():
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
    if version != SCHEMA_VERSION:
        raise BundleError(
            f"{mpath} has schema_version {version!r}; this lmve reads schema_version {SCHEMA_VERSION}",
            path=str(mpath))
    for key in ("files", "methods", "feature_names", "target_names", "coverage", "centre"):
        if key not in manifest:
            raise BundleError(f"{mpath} lacks the required key {key!r}", path=str(mpath))
    return manifest


def _verified_bytes(path: Path, manifest: dict) -> dict[str, bytes]:
    """Read every listed file and check its sha256 before anything is deserialised."""
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
            raise BundleError(
                f"{fpath} does not match the manifest (sha256 {actual[:12]}..., expected {digest[:12]}...): "
                "the file was modified or corrupted", path=str(fpath))
        out[name] = data
    return out


def _npz(data: bytes, name: str, path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:
        raise BundleError(f"{path / name} is not a readable array file: {exc}", path=str(path / name)) from None


def load_bundle(path) -> RegionModel:
    """Verify and load a bundle directory into a :class:`RegionModel`."""
    path = Path(path)
    manifest = read_manifest(path)
    blobs = _verified_bytes(path, manifest)

    def need(name):
        if name not in blobs:
            raise BundleError(f"{path / name} is required but not listed in the manifest", path=str(path / name))
        return blobs[name]

    try:
        scaler = _npz(need("scaler.npz"), "scaler.npz", path)
        centre = SVRCentre.from_arrays(_npz(need("centre.npz"), "centre.npz", path), manifest["centre"]["params"])
        scores = _npz(need("calibration.npz"), "calibration.npz", path)
        coverage = float(manifest["coverage"])
        methods = {}
        for name, entry in manifest["methods"].items():
            fname = entry["file"]
            shape = _load_shape(name, entry, need(fname), fname, path, manifest)
            if name not in scores:
                raise BundleError(f"{path / 'calibration.npz'} has no scores for method {name!r}",
                                  path=str(path / "calibration.npz"))
            cal = SplitConformalCalibrator().fit(scores[name])
            methods[name] = SplitConformalRegressor.from_fitted(centre, shape, cal, coverage)
    except BundleError:
        raise
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise BundleError(f"bundle {path} is inconsistent with its manifest: {type(exc).__name__}: {exc}",
                          path=str(path)) from None
    return RegionModel(
        feature_names=list(manifest["feature_names"]), target_names=list(manifest["target_names"]),
        scaler_mean=scaler["mean"], scaler_scale=scaler["scale"], methods=methods, coverage=coverage,
        manifest=manifest,
    )


def _load_shape(name: str, entry: dict, data: bytes, fname: str, path: Path, manifest: dict):
    d, n = int(manifest["d"]), int(manifest["n"])
    if name == "ge":
        est = GaussianEllipsoid()
        est.covariance_ = _npz(data, fname, path)["covariance"]
        est.n_features_in_, est.n_targets_ = d, n
        return est
    if name == "nle":
        a = _npz(data, fname, path)
        return NearestNeighbourEllipsoid.from_arrays(a["X_ref"], a["R_ref"], a["global_shape"],
                                                     entry["n_neighbors"], entry["local_weight"])
    if name == "lmve":
        import torch

        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise BundleError(f"{path / fname} is not a readable state_dict: {exc}", path=str(path / fname)) from None
        return LMVEShape.from_state_dict(state, n_features=d, n_targets=n, n_layers=entry["n_layers"],
                                         eps=entry["eps"], target_scale=entry["target_scale"],
                                         config=entry.get("config"), output=entry.get("output", "gram"))
    if name == "copula":
        a = _npz(data, fname, path)
        est = EmpiricalCopulaBox()
        k = int(entry["n_layers"])
        est.coefs_ = [a[f"coef_{i}"] for i in range(k)]
        est.intercepts_ = [a[f"intercept_{i}"] for i in range(k)]
        est.sigma_floor_ = a["sigma_floor"]
        est.calibration_marginals_ = a["calibration_marginals"]
        est.n_features_in_, est.n_targets_ = d, n
        return est
    raise BundleError(f"manifest names an unknown method {name!r}", path=str(path / MANIFEST))
