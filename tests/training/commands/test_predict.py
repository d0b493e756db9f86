"""``lmve-predict`` (tests/e2e/test_predict.py compares its rows with a real ``lmve-serve``'s answers): the Dask path on a 2-worker ``LocalCluster`` writes exactly what the local path writes, and bad input
names the column and line and leaves no file."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pandas as pd
import pytest

from models.bundle import load_bundle
from tests.training.walks import write_walk
from training.commands.predict import main

CHUNK = 64


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_dask_on_a_local_cluster_writes_what_the_local_path_writes(walk_repository, tmp_path, suffix):
    from training.data.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, Y = make_queries(700, seed=41)
    walk = write_walk(tmp_path / f"log{suffix}", model, X, Y)
    local, spread = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    common = ["--bundle", str(root / "synthetic"), "--input", str(walk), "--chunk-rows", "100", "--no-progress",
              "--contains", ",".join(model.target_names)]
    assert main([*common, "--out", str(local)]) == 0
    assert main([*common, "--out", str(spread), "--engine", "dask", "--workers", "2"]) == 0
    a, b = pd.read_parquet(local), pd.read_parquet(spread)
    assert len(a) == 700
    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.slow
def test_a_scheduler_address_is_used_and_each_worker_loads_the_bundle_once(walk_repository, tmp_path):
    from dask.distributed import Client, LocalCluster

    from training.data.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, _ = make_queries(900, seed=43)
    walk = write_walk(tmp_path / "log.parquet", model, X)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert main(["--bundle", str(root / "synthetic"), "--input", str(walk), "--out", str(tmp_path / "o.parquet"),
                     "--chunk-rows", "50", "--engine", "dask", "--scheduler", cluster.scheduler_address,
                     "--no-progress"]) == 0
        loads = client.run(lambda: list(__import__("training.commands.predict", fromlist=["LOADS"]).LOADS))
    assert len(pd.read_parquet(tmp_path / "o.parquet")) == 900
    assert all(len(v) <= 1 for v in loads.values()) and sum(len(v) for v in loads.values()) >= 1  # 18 partitions


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_bad_cells_name_the_column_and_line_and_leave_no_file(walk_repository, tmp_path, capsys, engine):
    from training.data.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, _ = make_queries(300, seed=5)
    X[250, 3] = np.nan  # line 252 of the file: in the fourth partition of 64 rows
    walk = write_walk(tmp_path / "log.csv", model, X)
    out = tmp_path / "regions.parquet"
    assert main(["--bundle", str(root / "synthetic"), "--input", str(walk), "--out", str(out), "--engine", engine,
                 "--chunk-rows", str(CHUNK), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert repr(model.feature_names[3]) in err and "line 252" in err and "empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv"]  # no output, no temporary file


def test_inputs_and_options_are_checked_before_anything_is_written(walk_repository, tmp_path, capsys):
    from training.data.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, _ = make_queries(20, seed=5)
    walk = write_walk(tmp_path / "log.csv", model, X)
    short = tmp_path / "short.csv"
    pd.read_csv(walk).drop(columns=[model.feature_names[5]]).to_csv(short, index=False)
    base = ["--bundle", str(root / "synthetic"), "--no-progress"]
    cases = [(["--input", str(short), "--out", str(tmp_path / "o.csv")], ["feature column", model.feature_names[5]]),
             (["--input", str(walk), "--out", str(tmp_path / "o.txt")], ["--out", ".parquet"]),
             (["--input", str(walk), "--out", str(tmp_path / "o.csv"), "--contains", "x"], ["--contains", "2 targets"]),
             (["--input", str(walk), "--out", str(tmp_path / "o.csv"), "--keep", "nope"], ["--keep column", "nope"]),
             (["--input", str(walk), "--out", str(tmp_path / "o.csv"), "--method", "copula"], ["--method", "nle"]),
             (["--input", str(tmp_path / "none.csv"), "--out", str(tmp_path / "o.csv")], ["does not exist"])]
    for argv, words in cases:
        assert main([*base, *argv]) == 2
        err = capsys.readouterr().err
        for w in words:
            assert w in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "short.csv"]
    # a gzip CSV streams locally; Dask refuses it (it cannot be split), naming the way out
    gz = tmp_path / "log.csv.gz"
    with open(walk, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert main([*base, "--input", str(gz), "--out", str(tmp_path / "o.csv"), "--chunk-rows", "7"]) == 0
    assert len(pd.read_csv(tmp_path / "o.csv")) == 20
    assert main([*base, "--input", str(gz), "--out", str(tmp_path / "d.csv"), "--engine", "dask"]) == 2
    assert "decompress it or convert it to Parquet" in capsys.readouterr().err
