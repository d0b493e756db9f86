"""``lmve-train --split-by COL --engine dask`` on a real ``LocalCluster``: the repository the local engine
writes (the same models, failures and arrays, bit for bit with the threads fixed), and a clear refusal before any training when the workers
lack the data or the package."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from models.bundle import load_bundle
from models.exceptions import InputError
from training.commands.train import main
from training.data.location import TrainingSettings

COMMON = ["--targets", "x,y", "--split-by", "building", "--methods", "ge,nle,lmve", "--lmve-max-steps", "150",
          "--quiet"]


def local_cluster(**options):
    from dask.distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, **options)


@pytest.mark.slow
def test_dask_writes_the_repository_the_local_engine_writes(survey_csv, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LMVE_TORCH_THREADS", "1")  # fixed threads: the workers train with this process's counts
    local, spread = tmp_path / "local", tmp_path / "dask"
    assert main(["--csv", str(survey_csv), *COMMON, "--out", str(local)]) == 1  # building=C: too few rows
    with local_cluster() as cluster:
        assert main(["--csv", str(survey_csv), *COMMON, "--out", str(spread), "--engine", "dask", "--scheduler",
                     cluster.scheduler_address]) == 1
        from dask.distributed import Client

        with Client(cluster) as client:  # the workers keep no copy of the data once the run is over
            loaded = client.run(lambda: len(__import__("training.commands.sites_dask", fromlist=["x"])._LOADED))
            assert set(loaded.values()) == {0}
    printed = capsys.readouterr().out
    a, b = (json.loads((p / "repository.json").read_text()) for p in (local, spread))
    assert list(b["models"]) == list(a["models"]) == ["building=A", "building=B"]
    assert b["failed"] == a["failed"] and "at least 60 are needed" in b["failed"]["building=C"]["reason"]
    assert "building=C" in printed and "FAILED" in printed and "(Dask)" in printed
    X = pd.read_csv(survey_csv).drop(columns=["x", "y", "building"]).to_numpy()
    for name in a["models"]:
        for key in ("value", "rows", "primary_method", "test_coverage", "test_volume", "guarantee"):
            assert b["models"][name][key] == a["models"][name][key], (name, key)
        ma, mb = load_bundle(local / name), load_bundle(spread / name)
        for method in ma.methods:  # the same regions, bit for bit, on every row of the survey
            ra, rb = ma.predict_region(X, method).regions, mb.predict_region(X, method).regions
            np.testing.assert_array_equal(rb.centers, ra.centers)
            np.testing.assert_array_equal(rb.shapes, ra.shapes)
        files = sorted(p.name for p in (local / name).iterdir())
        assert files == sorted(p.name for p in (spread / name).iterdir())
        for file in files:
            if not file.endswith(".npz"):
                continue
            with np.load(local / name / file) as fa, np.load(spread / name / file) as fb:
                for key in fa.files:  # every array, bit for bit
                    np.testing.assert_array_equal(fb[key], fa[key], err_msg=f"{name}/{file}:{key}")
        assert (spread / "reports" / name / "report.md").is_file()
    assert not [p for p in spread.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_dask_engine_flags_go_together(survey_csv, tmp_path):
    base = ["--csv", str(survey_csv), "--targets", "x,y", "--out", str(tmp_path / "r"), "--quiet"]
    for extra, flag in ((["--engine", "dask"], "--engine"), (["--split-by", "building", "--workers", "2"], "--workers"),
                        (["--split-by", "building", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
                        (["--split-by", "building", "--engine", "dask", "--workers", "0"], "--workers")):
        assert main([*base, *extra]) == 2, extra
        assert not (tmp_path / "r").exists()
    from training.commands.train import build_parser
    from training.commands.train_args import config_from_args

    args = build_parser().parse_args([*base, "--split-by", "building", "--engine", "dask", "--workers", "2",
                                      "--scheduler", "tcp://127.0.0.1:1"])
    with pytest.raises(InputError, match="--workers sizes a local cluster") as err:
        config_from_args(args)
    assert err.value.field == "--workers"


def _uji(tmp_path_factory, rows: int | None):
    """A data directory whose UJIIndoorLoc holds the first ``rows`` rows (``None``: an empty directory)."""
    root = tmp_path_factory.mktemp("worker-data")
    if rows is not None:
        source = TrainingSettings().data_dir / "indoor_localization" / "TrainingData.csv.gz"
        (root / "indoor_localization").mkdir()
        with gzip.open(root / "indoor_localization" / "TrainingData.csv.gz", "wt") as f:
            pd.read_csv(source, nrows=rows).to_csv(f, index=False)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("rows, says", [(None, "cannot load the data"), (2000, "loads other data")])
def test_workers_without_the_data_are_named_before_any_training(tmp_path_factory, tmp_path, rows, says, capsys):
    data = TrainingSettings().data_dir  # None: no data directory beside the clone
    if data is None or not (data / "indoor_localization").is_dir():
        pytest.skip("UJIIndoorLoc is not under LMVE_DATA_DIR (no data directory found)")
    with local_cluster(env={"LMVE_DATA_DIR": str(_uji(tmp_path_factory, rows))}) as cluster:
        code = main(["--dataset", "indoor_localization", "--split-by", "BUILDINGID", "--engine", "dask",
                     "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Dask worker tcp://" in err and "indoor_localization" in err
    assert not (tmp_path / "r").exists()


PRELOAD = '''
import sys
from pathlib import Path
# this worker cannot import lmve: no editable finder, no path holding its packages
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "training" / "__init__.py").is_file()]
for name in [m for m in sys.modules if m.split(".")[0] in ("training", "models", "service")]:
    del sys.modules[name]
'''


@pytest.mark.slow
def test_a_worker_without_the_package_is_named(survey_csv, tmp_path, capsys):
    preload = tmp_path / "no_lmve.py"
    preload.write_text(PRELOAD)
    with local_cluster(preload=[str(preload)]) as cluster:
        code = main(["--csv", str(survey_csv), *COMMON, "--engine", "dask", "--scheduler", cluster.scheduler_address,
                     "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "lacks the lmve package" in err and "No module named 'training'" in err
    assert not (tmp_path / "r").exists()
