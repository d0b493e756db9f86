"""python -m benchmarks.bench: one split of one small dataset, through the local (joblib) and Dask backends."""

import json

import pandas as pd
import pytest

from tests.conftest import needs_data
from benchmarks.bench import main
from benchmarks.harness.tables import TABLE1_COLUMNS

ARGS = ["--datasets", "enb", "--seeds", "0", "--lmve-max-steps", "40", "--quiet"]


def check_outputs(out, cache):
    t1 = pd.read_csv(out / "table1.csv")
    assert list(t1.columns) == TABLE1_COLUMNS
    assert set(t1.method) == {"ge", "nle", "lmve", "copula"} and set(t1.dataset) == {"enb"}
    assert (t1.n_splits == 1).all()
    assert t1.coverage_mean.between(0, 1).all() and (t1.volume_mean > 0).all()
    assert (t1.paper_volume > 0).all()  # the paper's figures sit beside ours
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and runs.coverage.between(0, 1).all()
    assert "| enb | lmve | 1 |" in (out / "table1.md").read_text()
    assert (out / "volumes.png").read_bytes()[:4] == b"\x89PNG"
    record = json.loads((cache / "paper" / "enb" / "seed_000.json").read_text())
    assert record["n_test"] == 77 and record["lmve"]["history"]["train"]["steps"] <= 40


@pytest.mark.slow
@needs_data
def test_local_backend_and_resume(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main([*ARGS, "--jobs", "1", "--out", str(out), "--cache", str(cache)]) == 0
    check_outputs(out, cache)
    entry = cache / "paper" / "enb" / "seed_000.json"
    stamp = entry.stat().st_mtime_ns
    assert main([*ARGS, "--jobs", "1", "--out", str(out), "--cache", str(cache)]) == 0
    assert entry.stat().st_mtime_ns == stamp  # cached split not recomputed


@needs_data
def test_cached_only_tabulates_what_is_cached_and_runs_nothing(tmp_path, capsys):
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["--datasets", "enb", "--lmve-max-steps", "40", "--quiet", "--jobs", "1", "--cache", str(cache)]
    assert main([*args, "--seeds", "0-1", "--cached-only", "--out", str(out)]) == 2
    assert "none of the requested splits is in" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--seeds", "0", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main([*args, "--seeds", "0-2", "--cached-only", "--out", str(out)]) == 0
    assert "2 of 3 splits are not in" in capsys.readouterr().err
    assert not (cache / "paper" / "enb" / "seed_001.json").exists()  # nothing was run
    assert pd.read_csv(out / "runs.csv").seed.unique().tolist() == [0]


@pytest.mark.slow
@needs_data
def test_dask_backend_on_a_local_cluster(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    out, cache = tmp_path / "out", tmp_path / "cache"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert main([*ARGS, "--scheduler", cluster.scheduler_address, "--out", str(out),
                     "--cache", str(cache)]) == 0
    check_outputs(out, cache)


def test_bad_dataset_name_is_a_clear_error(tmp_path, capsys):
    assert main(["--datasets", "nope", "--seeds", "0", "--out", str(tmp_path), "--cache", str(tmp_path)]) == 2
    assert "dataset must be one of" in capsys.readouterr().err


def test_markdown_puts_scaled_datasets_in_the_papers_units():
    """residential_building's loader divides both targets by 100: det(C)^1/2 is 1e4 times smaller."""
    from benchmarks.harness.tables import markdown_table
    from benchmarks.harness.variants import PAPER_TABLE1

    t1 = pd.DataFrame([("enb", "lmve", 50, 0.9, 0.04, 17.9, 2.0, 17.9, 1.0),
                       ("residential_building", "lmve", 50, 0.9, 0.06, 22.0, 5.0, 1.1e5, 1.0)],
                      columns=TABLE1_COLUMNS)
    text = markdown_table(t1, "t")
    enb, res = (line.split(" | ") for line in text.splitlines() if line.startswith("| enb") or
                line.startswith("| residential"))
    assert enb[6] == "17.9" and enb[8] == "1.00"  # factor 1: ratio is ours / paper
    assert res[6] == "2.2e+05" and res[8] == f"{22.0 * 1e4 / PAPER_TABLE1['residential_building']['lmve'][1]:.2f}"
    assert "residential_building: unit factor 1e+04" in text and "indoor_localization: unit" not in text


@pytest.mark.slow
def test_a_data_set_with_a_known_optimum_records_it_per_split(tmp_path):
    from training.data.datasets import load_dataset, oracle_volume
    from training.pipeline import paper_split

    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["--datasets", "synthetic_oracle", "--seeds", "1", "--methods", "ge,nle", "--quiet", "--jobs", "1",
                 "--variant", "defaults", "--out", str(out), "--cache", str(cache)]) == 0
    record = json.loads((cache / "defaults" / "synthetic_oracle" / "seed_001.json").read_text())
    test_rows = paper_split(2000, 1).test
    assert record["oracle_volume"] == pytest.approx(oracle_volume(load_dataset("synthetic_oracle"), test_rows, 0.9))
    runs = pd.read_csv(out / "variants" / "defaults" / "runs.csv")
    assert (runs.oracle_volume == record["oracle_volume"]).all()
    # no calibrated ellipse beats the smallest region at the level by more than the test part's sampling error
    assert (runs.volume_paper > 0.8 * runs.oracle_volume).all()


def test_the_papers_reference_threshold_against_the_exact_one():
    import numpy as np

    from models.calibration.conformal import conformal_quantile
    from benchmarks.harness.tasks import reference_threshold

    scores = np.random.default_rng(0).permutation(np.arange(1.0, 101.0))
    # n = 100: floor(101 * 0.9) / 100 = 0.9 -> position 89.1 of 0..99 -> 90.1; the exact rule: the 91st score
    assert reference_threshold(scores, 0.9) == pytest.approx(90.1)
    assert conformal_quantile(scores, 0.9) == 91.0
    # n = 19: (n + 1) eta = 18 whole -> level 18 / 19, position 18 * 18 / 19; the exact rule: the 18th score
    assert reference_threshold(np.arange(1.0, 20.0), 0.9) == pytest.approx(1 + 18 * 18 / 19)
    assert conformal_quantile(np.arange(1.0, 20.0), 0.9) == 18.0
    assert reference_threshold(np.arange(1.0, 6.0), 0.9) == 5.0  # n = 5: floor(5.4) / 5 = 1, the maximum


def test_true_centre_variant_gives_the_true_mean_and_refuses_data_without_one():
    import numpy as np

    from models.exceptions import InputError
    from benchmarks.harness.tasks import SplitTask, _config_and_data
    from training.data.synthetic import oracle_mean

    _, ds, _ = _config_and_data(SplitTask("synthetic_oracle", 0, "true-centre"))
    np.testing.assert_array_equal(ds.centers, oracle_mean(ds.X))
    assert ds.centre_columns == ["true_y1", "true_y2"]
    with pytest.raises(InputError, match="variant true-centre needs a data set that knows its true mean "
                                         r"\(synthetic_oracle\); synthetic does not") as info:
        _config_and_data(SplitTask("synthetic", 0, "true-centre"))
    assert (info.value.field, info.value.received) == ("variant", "synthetic")


@pytest.mark.slow
@needs_data
def test_the_paper_variant_reads_its_split_off_the_reference_quantile_run(tmp_path):
    """reference-quantile calibrates the same fits by both rules: the paper variant's split is its exact half,
    read off the cache (also under --cached-only), and a task with other settings is fitted anew."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    base = [*ARGS, "--jobs", "1", "--out", str(out), "--cache", str(cache)]
    assert main([*base, "--variant", "reference-quantile"]) == 0
    ref = json.loads((cache / "reference-quantile" / "enb" / "seed_000.json").read_text())
    entry = cache / "paper" / "enb" / "seed_000.json"
    other = [a if a != "40" else "30" for a in base]  # other LMVE settings: not the twin's task, fitted anew
    assert main([*other, "--out", str(tmp_path / "other")]) == 0
    assert "from_variant" not in json.loads(entry.read_text())
    entry.unlink()
    assert main([*base, "--cached-only"]) == 0
    paper = json.loads(entry.read_text())
    assert paper["from_variant"] == "reference-quantile" and paper["task"]["variant"] == "paper"
    assert paper["metrics"] == ref["metrics_exact"] != ref["metrics"]
    assert paper["wall_seconds"] == ref["wall_seconds"] and "metrics_exact" not in paper
    assert "1 of these 1 splits are the `reference-quantile` run's fits" in (out / "table1.md").read_text()
    runs = pd.read_csv(out / "runs.csv").sort_values("method")
    exact = pd.read_csv(out / "variants" / "reference-quantile" / "runs.csv").sort_values("method")
    assert runs.volume_paper.tolist() == pytest.approx(exact.volume_paper_exact.tolist())
