"""``lmve-convert-bundle OLD NEW``: rewrite a schema-1 bundle (LMVE as a torch ``state_dict``) as schema 2.

Schema 1 stored the LMVE network as ``lmve.pt``, read with ``torch.load(weights_only=True)``;
schema 2 stores every method as plain arrays, so serving needs no torch. This converter (part of
the training install) verifies the old bundle's hashes, reads its files, and writes an equivalent
schema-2 bundle atomically: same scaler, centre, shapes and calibration scores, so the same
regions. The new manifest records the old bundle's id under ``training.converted_from``.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

from models import registry
from models.bundle import read_manifest, read_npz, save_bundle, verified_files
from models.calibration.conformal import SplitConformalCalibrator
from models.exceptions import BundleError, LMVEError
from models.model import RegionModel
from models.predictor import SplitConformalRegressor
from training import require_training_install


def _lmve_arrays(data: bytes, entry: dict, d: int, path: Path) -> tuple[dict, dict]:
    """Schema 1's ``lmve.pt`` state_dict -> schema 2's LMVE ``(params, arrays)``."""
    import torch

    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BundleError(f"{path / 'lmve.pt'} is not a readable state_dict: {exc}", path=str(path / "lmve.pt")) from None
    k = int(entry["n_layers"])
    arrays = {}
    for i in range(k):
        arrays[f"W_{i}"] = state[f"layers.{i}.weight"].double().numpy().T.copy()
        arrays[f"b_{i}"] = state[f"layers.{i}.bias"].double().numpy()
    n = int(round(np.sqrt(arrays[f"b_{k - 1}"].shape[0])))
    inf = np.full(d, np.inf)
    arrays["input_low"] = state["input_low"].double().numpy() if "input_low" in state else -inf
    arrays["input_high"] = state["input_high"].double().numpy() if "input_high" in state else inf
    arrays["floor_shape"] = state["floor_shape"].double().numpy() if "floor_shape" in state else np.zeros((n, n))
    floor_weight = float(state["floor_weight"]) if "floor_weight" in state else 0.0
    params = {"n_layers": k, "eps": entry["eps"], "target_scale": entry["target_scale"], "floor_weight": floor_weight,
              "output": entry.get("output", "gram"), "n_features": d, "loss": entry.get("loss", "paper"),
              "batch_size": entry.get("batch_size"), "config": entry.get("config"), "history": entry.get("history")}
    return params, arrays


def _params_v1(name: str, entry: dict, d: int) -> dict:
    """Schema 1 kept a method's few parameters in its manifest entry; schema 2 under ``params``."""
    if name == "nle":
        return {"n_neighbors": entry["n_neighbors"], "local_weight": entry["local_weight"]}
    if name == "copula":
        return {"n_layers": entry["n_layers"], "n_features": d}
    return {"n_features": d}


def convert_bundle(src, dst) -> dict:
    """Read the schema-1 bundle ``src`` (hashes verified) and write it as schema 2 to ``dst``; return the manifest."""
    src, dst = Path(src), Path(dst)
    manifest = read_manifest(src, schema_version=1)
    blobs = verified_files(src, manifest)
    d = int(manifest["d"])
    try:
        scaler = read_npz(blobs["scaler.npz"], "scaler.npz", src)
        centre = registry.CENTRE_TYPES["SVRCentre"].from_arrays(manifest["centre"]["params"],
                                                               read_npz(blobs["centre.npz"], "centre.npz", src))
        scores = read_npz(blobs["calibration.npz"], "calibration.npz", src)
        methods = {}
        for name, entry in manifest["methods"].items():
            data = blobs[entry["file"]]
            if name == "lmve":
                params, arrays = _lmve_arrays(data, entry, d, src)
            else:
                params, arrays = _params_v1(name, entry, d), read_npz(data, entry["file"], src)
            shape = registry.method(name).estimator.from_arrays(params, arrays)
            cal = SplitConformalCalibrator().fit(scores[name])
            methods[name] = SplitConformalRegressor.from_fitted(centre, shape, cal, float(manifest["coverage"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise BundleError(f"bundle {src} is inconsistent with its manifest: {type(exc).__name__}: {exc}",
                          path=str(src)) from None
    model = RegionModel(feature_names=manifest["feature_names"], target_names=manifest["target_names"],
                        scaler_mean=scaler["mean"], scaler_scale=scaler["scale"], methods=methods,
                        coverage=float(manifest["coverage"]))
    training = {**manifest.get("training", {}), "converted_from": {"bundle_id": manifest.get("bundle_id"),
                                                                   "schema_version": 1}}
    return save_bundle(model, dst, dataset=manifest.get("dataset"), metrics=manifest.get("metrics"), training=training)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lmve-convert-bundle", description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path, help="schema-1 bundle directory")
    p.add_argument("new", type=Path, help="where to write the schema-2 bundle (replaced atomically)")
    return p


def main(argv: list[str] | None = None) -> int:
    require_training_install("lmve-convert-bundle")
    args = build_parser().parse_args(argv)
    try:
        manifest = convert_bundle(args.old, args.new)
    except LMVEError as exc:
        print(f"lmve-convert-bundle: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.new} (schema {manifest['schema_version']}, id {manifest['bundle_id']})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
