"""Schema-1 bundles (LMVE as a torch state_dict): refused by the loader with the converter's name,
converted by ``lmve-convert-bundle`` to a schema-2 bundle that gives the same regions."""

import io
import json
import shutil

import numpy as np
import pytest
import torch

from models.bundle import load_bundle, read_manifest, sha256_bytes
from models.exceptions import BundleError
from training.commands.convert import main


def write_schema_1(src, dst):
    """``dst``: the schema-2 bundle ``src`` rewritten the way schema 1 stored it (``lmve.pt``)."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    with np.load(dst / "lmve.npz") as z:
        a = {k: z[k] for k in z.files}
    p = m["methods"]["lmve"]["params"]
    state = {}
    for i in range(p["n_layers"]):
        state[f"layers.{i}.weight"] = torch.as_tensor(a[f"W_{i}"].T.astype(np.float32))
        state[f"layers.{i}.bias"] = torch.as_tensor(a[f"b_{i}"].astype(np.float32))
    state["input_low"], state["input_high"] = torch.as_tensor(a["input_low"]), torch.as_tensor(a["input_high"])
    state["floor_weight"] = torch.tensor(p["floor_weight"])
    state["floor_shape"] = torch.as_tensor(a["floor_shape"])
    buf = io.BytesIO()
    torch.save(state, buf)
    (dst / "lmve.npz").unlink()
    (dst / "lmve.pt").write_bytes(buf.getvalue())
    for name, entry in m["methods"].items():
        params = entry.pop("params")
        if name == "lmve":
            entry.update(file="lmve.pt", **{k: params[k] for k in ("n_layers", "eps", "target_scale", "output",
                                                                    "loss", "batch_size", "config", "history")})
        elif name == "nle":
            entry.update(n_neighbors=params["n_neighbors"], local_weight=params["local_weight"])
        elif name == "copula":
            entry.update(n_layers=params["n_layers"])
    m["centre"].pop("file")
    m["files"] = {f.name: sha256_bytes(f.read_bytes()) for f in dst.iterdir() if f.name != "manifest.json"}
    m["schema_version"] = 1
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def test_schema_1_is_refused_with_the_command_that_converts_it(bundle_dir, tmp_path):
    old = write_schema_1(bundle_dir, tmp_path / "old")
    with pytest.raises(BundleError, match=r"schema_version 1.*lmve-convert-bundle .*old NEW_DIR"):
        load_bundle(old)


def test_converted_bundle_gives_the_same_regions(bundle_dir, tmp_path, trained_synthetic, capsys):
    old = write_schema_1(bundle_dir, tmp_path / "old")
    assert main([str(old), str(tmp_path / "new")]) == 0
    assert "schema 2" in capsys.readouterr().out
    new, ref = load_bundle(tmp_path / "new"), load_bundle(bundle_dir)
    assert read_manifest(tmp_path / "new")["training"]["converted_from"]["bundle_id"] == ref.manifest["bundle_id"]
    X = trained_synthetic[1].X[:50]
    for name in ref.methods:
        a, b = ref.predict_region(X, method=name).regions, new.predict_region(X, method=name).regions
        assert a.alpha_q == b.alpha_q
        got, want = (b.shapes, a.shapes) if a.kind == "ellipsoid" else (b.half_widths, a.half_widths)
        # LMVE went through float32 in schema 1: equal to float32 precision
        np.testing.assert_allclose(got, want, rtol=1e-5 if name == "lmve" else 0)


def test_a_tampered_schema_1_bundle_is_not_converted(bundle_dir, tmp_path, capsys):
    old = write_schema_1(bundle_dir, tmp_path / "old")
    data = bytearray((old / "lmve.pt").read_bytes())
    data[-20] ^= 0xFF
    (old / "lmve.pt").write_bytes(bytes(data))
    assert main([str(old), str(tmp_path / "new")]) == 2
    assert "lmve.pt does not match the manifest" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
