"""What ``train()`` fits, as fingerprints that a refactor must leave unchanged.

Eleven configurations (the synthetic survey with the centre chosen, grouped, stacked, screened and given by the
client; ``enb`` cross-fitted; a UJIIndoorLoc sample across phones by cross-fit and by held-out phones, with the
centre chosen, and with floors; the synthetic floor survey; a small survey cross-fitted), each trained once, each
reduced to what must not move: the test metrics, the centre's record, the served-method choice's evidence, the
stage names, the survey-size guidance and a hash of every method's regions on the test rows. Seconds are dropped,
and the thread counts are fixed (``LMVE_TORCH_THREADS=1``: no fit follows the idle cores, whose count changes the
last bits of a multithreaded product). The ungrouped configurations pin the row protocol (``use_groups=False``),
as they were trained before ``train()`` grouped a survey by position itself.

``python -m benchmarks.fingerprints`` writes ``benchmarks/results/fingerprints.json``;
``python -m benchmarks.fingerprints --compare`` trains again, names every fingerprint that differs from that
file (exit status 1) and records the outcome with its commit in ``benchmarks/results/fingerprints_check.md``, so a
change meant to move no number can show it moved none.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import asdict, replace

import numpy as np

from benchmarks.common import DATA_DIR, RESULTS, command, commit, write_json, write_text

OUT = RESULTS / "fingerprints.json"
CHECK = RESULTS / "fingerprints_check.md"
#: keys whose values are wall times or memory: never part of a fingerprint
VOLATILE = ("seconds", "time", "timing", "mib", "elapsed")


def _uji(seed: int = 0, rows: int = 3000):
    """``rows`` rows of UJIIndoorLoc's survey drawn at random (every building and phone)."""
    from training.data.datasets import load_dataset, subset

    ds = load_dataset("indoor_localization", DATA_DIR)
    pick = np.sort(np.random.default_rng(seed).choice(len(ds.X), size=rows, replace=False))
    return subset(ds, pick, name="uji_sample")


def configurations():
    """``name -> (dataset, TrainConfig)``, built lazily (each loads its own data)."""
    from training.data.datasets import group_by_position, load_dataset
    from training.pipeline import TrainConfig

    fast = ("ge", "nle", "copula", "ball")
    lmve = {"lmve": {"max_steps": 300, "n_ensemble": 1}}
    syn = lambda: load_dataset("synthetic", seed=0)  # noqa: E731
    return {
        "synthetic-auto": lambda: (syn(), TrainConfig(seed=0, centre="auto", methods=fast + ("lmve",),
                                                      method_params=lmve, use_groups=False)),
        "synthetic-grouped": lambda: (group_by_position(syn()), TrainConfig(seed=1, centre="knn", methods=fast)),
        "synthetic-stack": lambda: (syn(), TrainConfig(seed=2, centre="stack", methods=("ge", "nle"),
                                                                    use_groups=False)),
        "synthetic-screened": lambda: (load_dataset("synthetic", n_samples=4000, seed=3),
                                       TrainConfig(seed=3, centre="auto", centre_screen_rows=1000,
                                                   methods=("ge", "nle"), use_groups=False)),
        "synthetic-client": lambda: _client(syn()),
        "enb-cross-fit": lambda: (load_dataset("enb", DATA_DIR), TrainConfig(seed=0, centre="paper", cross_fit=5,
                                                                             methods=fast)),
        "uji-across-cross-fit": lambda: (_uji(), TrainConfig(seed=0, centre="knn", rssi="auto",
                                                                      calibrate_across=("PHONEID",),
                                                                      methods=("ge", "nle", "copula"),
                                                                      use_groups=False)),
        "uji-across-held-out": lambda: (_uji(), TrainConfig(seed=1, centre="knn", rssi="auto",
                                                                     calibrate_across=("PHONEID",),
                                                                     across_mode="held-out", coverage=0.8,
                                                                     methods=("ge", "nle"), use_groups=False)),
        "uji-auto-floors": lambda: (_uji(), TrainConfig(seed=0, centre="auto", rssi="auto",
                                                                 centre_candidates=("knn", "scaled"),
                                                                 floor_column="FLOOR", building_column="BUILDINGID",
                                                                 methods=("ge", "nle"), use_groups=False)),
        "floors": lambda: (load_dataset("floors", seed=0), TrainConfig(seed=0, methods=("ge", "nle"),
                                                                       floor_column="floor", use_groups=False)),
        "small-survey-cross-fit": lambda: (group_by_position(load_dataset("synthetic", n_samples=150, seed=4)),
                                           TrainConfig(seed=4, centre="knn", methods=("ge", "nle"),
                                                       calibration_mode="cross-fit")),
    }


def _client(ds):
    """The synthetic survey with a client's own (noisy) position estimate per row: centre="client"."""
    from training.pipeline import TrainConfig

    rng = np.random.default_rng(5)
    return replace(ds, centers=ds.Y + rng.normal(0, 0.5, ds.Y.shape), centre_columns=["est_x", "est_y"]), \
        TrainConfig(seed=5, methods=("ge", "nle"), use_groups=False)


def _plain(value):
    """``value`` with volatile keys dropped and floats kept exact (``repr``), arrays hashed."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
                if not any(w in str(k).lower() for w in VOLATILE)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return "sha256:" + hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
    if isinstance(value, (np.floating, float)):
        return repr(float(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "__dataclass_fields__"):
        return _plain(asdict(value))
    return repr(type(value).__name__)


def _regions_hash(model, ds, rows) -> dict:
    """Per method, a hash of its whole answer on ``rows``: regions, floor sets, typicality, warnings."""
    centers = None if ds.centers is None else ds.centers[rows]
    out = {}
    for name in model.methods:
        answer = model.predict_region(ds.X[rows], method=name, centers=centers)
        text = json.dumps(_exact(asdict(answer)), sort_keys=True)
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:24]
    return out


def _exact(value):
    """``value`` with every array as the hash of its bytes (dtype and shape included)."""
    if isinstance(value, dict):
        return {str(k): _exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return f"{a.dtype}{a.shape}:" + hashlib.sha256(a.tobytes()).hexdigest()
    return repr(value)


def fingerprint(ds, config) -> dict:
    """What one ``train(ds, config)`` must reproduce."""
    from training.pipeline import train

    result = train(ds, config)
    model = result.model
    return {"metrics": _plain(result.metrics), "centre": _plain(result.centre),
            "selection": _plain(getattr(model, "selection", None)),
            "floors": _plain(getattr(getattr(model, "floors", None), "metrics", None)),
            "stages": sorted(result.stages), "survey_size": _plain(result.survey_size),
            "split": {k: _plain(np.asarray(getattr(result.split, k))) for k in ("train", "calibration", "test")},
            "regions": _regions_hash(model, ds, result.split.test if len(result.split.test) else
                                     result.split.calibration)}


def diff(a, b, path="") -> list[str]:
    """Where two fingerprints differ, as ``path: old -> new`` lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b)) for line in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fingerprints", description=__doc__.split("\n\n")[0])
    p.add_argument("--compare", action="store_true", help=f"train again and compare with {OUT.name}")
    p.add_argument("--only", nargs="*", help="these configurations only")
    args = p.parse_args(argv)
    os.environ["LMVE_TORCH_THREADS"] = "1"
    configs = configurations()
    names = args.only or list(configs)
    prints = {}
    for name in names:
        print(f"{name} ...", flush=True)
        prints[name] = fingerprint(*configs[name]())
    if not args.compare:
        write_json(OUT, {"commit": commit(), "command": command("fingerprints", argv),
                         "fingerprints": prints}, indent=1)
        print(f"wrote {OUT}")
        return 0
    reference = json.loads(OUT.read_text())
    lines = [f"{name}: {line}" for name in names for line in diff(reference["fingerprints"].get(name, {}),
                                                                  prints[name])]
    verdict = "equal" if not lines else f"{len(lines)} differences"
    print(f"against {OUT.name} (commit {reference['commit']}): {verdict}")
    print("\n".join(lines))
    if not args.only:  # a whole check is recorded; a partial one only printed
        write_text(CHECK, f"# train() fingerprints against the reference\n\n`{command('fingerprints', argv)}` at "
                          f"{commit()} against `{OUT.name}` (taken at {reference['commit']}): **{verdict}** over "
                          f"{len(names)} configurations ({', '.join(names)}).\n"
                          + ("".join(f"\n- {line}" for line in lines) + "\n" if lines else ""))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
