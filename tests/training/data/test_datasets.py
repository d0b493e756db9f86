import numpy as np
import pytest

from models.exceptions import InputError
from training.data import synthetic
from training.data.datasets import MIN_ROWS, load_csv, load_dataset
from tests.conftest import needs_data


def write_csv(path, n=80, seed=0):
    rng = np.random.default_rng(seed)
    lines = ["a,b,c,x,y"]
    for _ in range(n):
        a, b, c = rng.normal(size=3)
        lines.append(f"{a},{b},{c},{a + 0.1 * rng.normal()},{b - c}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_synthetic_generator_shapes_and_heteroscedastic_noise():
    X, Y, fn, tn = synthetic.make_localization(3000, seed=1)
    assert X.shape == (3000, 16) and Y.shape == (3000, 2) and len(fn) == 16 and tn == ["x_m", "y_m"]
    assert (X >= -100).all() and (X < 0).all()
    X2, Y2, *_ = synthetic.make_localization(3000, seed=1)
    np.testing.assert_array_equal(Y, Y2)  # seeded


def test_csv_loader_reads_features_and_targets(tmp_path):
    ds = load_csv(write_csv(tmp_path / "d.csv"), ["x", "y"])
    assert ds.feature_names == ["a", "b", "c"] and ds.target_names == ["x", "y"]
    assert ds.X.shape == (80, 3) and ds.Y.shape == (80, 2)
    ds2 = load_csv(tmp_path / "d.csv", ["x", "y"], ["c", "a"])
    np.testing.assert_array_equal(ds2.X[:, 1], ds.X[:, 0])


def test_a_parquet_file_loads_as_its_csv_does(tmp_path):
    import pandas as pd

    csv = write_csv(tmp_path / "d.csv")
    pd.read_csv(csv).to_parquet(tmp_path / "d.parquet")
    a, b = load_csv(csv, ["x", "y"]), load_csv(tmp_path / "d.parquet", ["x", "y"])
    np.testing.assert_array_equal(b.X, a.X)
    np.testing.assert_array_equal(b.Y, a.Y)
    assert b.feature_names == a.feature_names
    frame = pd.read_csv(csv)
    frame["phone"] = np.where(np.arange(len(frame)) % 2, "p1", "p2")  # a label column, and an index of its own
    frame.set_index(frame.index + 100).to_parquet(tmp_path / "i.parquet")
    c = load_csv(tmp_path / "i.parquet", ["x", "y"], meta_columns=["phone"], groups=["x", "y"])
    np.testing.assert_array_equal(c.X, a.X)
    assert c.feature_names == a.feature_names and list(c.meta["phone"][:2]) == ["p2", "p1"]
    assert c.groups is not None and len(np.unique(c.groups)) == len(np.unique(a.Y, axis=0))
    frame["b"] = frame["b"].astype(str)
    frame.loc[5, "b"] = "weak"
    frame.to_parquet(tmp_path / "s.parquet")
    with pytest.raises(InputError, match="column 'b' must be numeric; line 7 of the file holds 'weak'"):
        load_csv(tmp_path / "s.parquet", ["x", "y"])
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="bad.parquet could not be read as Parquet"):
        load_csv(tmp_path / "bad.parquet", ["x", "y"])


def test_csv_missing_column(tmp_path):
    with pytest.raises(InputError, match=r"column\(s\) \['z'\] not found; the CSV has columns"):
        load_csv(write_csv(tmp_path / "d.csv"), ["x", "z"])


def test_csv_string_in_numeric_column(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    lines = p.read_text().splitlines()
    parts = lines[5].split(",")
    parts[1] = "oops"
    lines[5] = ",".join(parts)
    p.write_text("\n".join(lines))
    with pytest.raises(InputError, match=r"column 'b' must be numeric; line 6 of the file holds 'oops'"):
        load_csv(p, ["x", "y"])


def test_csv_nan_and_too_few_rows(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    lines = p.read_text().splitlines()
    lines[3] = "1,2,,4,5"
    p.write_text("\n".join(lines))
    with pytest.raises(InputError, match=r"column 'c' has a missing, NaN or infinite value at line 4 of the file"):
        load_csv(p, ["x", "y"])
    with pytest.raises(InputError, match=f"has 10 data rows; at least {MIN_ROWS} are needed"):
        load_csv(write_csv(tmp_path / "small.csv", n=10), ["x", "y"])
    with pytest.raises(InputError, match="at least 2 columns"):
        load_csv(write_csv(tmp_path / "e.csv"), ["x"])


def test_unknown_dataset_and_missing_data_dir(tmp_path):
    with pytest.raises(InputError, match="dataset must be one of"):
        load_dataset("mnist")
    with pytest.raises(InputError, match="does not exist"):
        load_dataset("enb", tmp_path / "nope")
    with pytest.raises(InputError, match="enb/data.csv is missing"):
        load_dataset("enb", tmp_path)


@needs_data
@pytest.mark.parametrize("name, rows, d, ", [("enb", 768, 8), ("ble_rssi", 1420, 13),
                                             ("residential_building", 372, 103)])
def test_paper_datasets_match_table2(name, rows, d):
    ds = load_dataset(name)
    assert ds.X.shape == (rows, d) and ds.Y.shape == (rows, 2)
    assert np.isfinite(ds.X).all() and np.isfinite(ds.Y).all()
    if name == "residential_building":
        assert ds.Y[:, 0].max() == pytest.approx(68.0)  # targets divided by 100


@needs_data
def test_indoor_localization_loader_semantics():
    ds = load_dataset("indoor_localization")
    assert ds.X.shape == (19937, 519) and ds.feature_names[-1] == "WAP519"
    assert 4864.7 < ds.Y[:, 0].min() and ds.Y[:, 0].max() < 4865.1  # latitude first, km


def test_the_visits_study_is_grouped_by_subject_and_needs_no_data_dir(monkeypatch):
    from training.data.datasets import load_dataset

    monkeypatch.setenv("LMVE_DATA_DIR", "/nonexistent")
    ds = load_dataset("visits", seed=4)
    subject = ds.meta["subject"]
    assert ds.grouping["by"] == "subject" and ds.grouping["n_groups"] == 35 == len(np.unique(subject))
    visits = np.bincount(subject)
    assert visits.min() >= 4 and visits.max() <= 12 and ds.X.shape == (visits.sum(), 7)
    # the months feature starts at 0 for each subject and grows
    months = ds.X[:, -1]
    assert all(months[subject == s][0] == 0 and np.all(np.diff(months[subject == s]) >= 0) for s in range(35))


def test_synthetic_oracle_noise_has_the_stated_covariance_and_its_optimum(monkeypatch):
    from scipy.stats import chi2

    from training.data.datasets import oracle_volume

    monkeypatch.setenv("LMVE_DATA_DIR", "/nonexistent")  # built in: no data directory
    ds = load_dataset("synthetic_oracle", n_samples=20000, seed=3)
    assert ds.X.shape == (20000, 6) and ds.Y.shape == (20000, 2) and (np.abs(ds.X) <= 1).all()
    S = synthetic.oracle_covariance(ds.X)
    E = ds.Y - synthetic.oracle_mean(ds.X)
    M = np.einsum("mi,mij,mj->m", E, np.linalg.inv(S), E)
    # the true covariance whitens the noise: chi-square(2) scores, so its 0.9 ellipses hold 90 % of the rows
    assert abs(np.mean(M <= chi2.ppf(0.9, 2)) - 0.9) < 0.008
    assert abs(np.mean(M) - 2.0) < 0.05
    np.testing.assert_allclose(ds.meta["sqrt_det_cov"], np.sqrt(np.linalg.det(S)))
    # the spread changes size and turns: the major axis at two corners of (x1, x2) points different ways
    corners = np.array([[-1.0, -1.0, 0, 0, 0, 0], [1.0, 0.0, 0, 0, 0, 0]])
    w, V = np.linalg.eigh(synthetic.oracle_covariance(corners))
    assert w[1, 1] / w[0, 1] > 10 and abs(V[0, :, 1] @ V[1, :, 1]) < 0.1
    rows = np.arange(100)
    expected = chi2.ppf(0.8, 2) * np.mean(ds.meta["sqrt_det_cov"][rows])
    assert oracle_volume(ds, rows, 0.8) == pytest.approx(expected, rel=1e-12)
    assert oracle_volume(load_dataset("synthetic", n_samples=200), rows, 0.8) is None
    with pytest.raises(InputError, match="n_features at least 3"):
        synthetic.make_oracle(100, n_features=2)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_columns_are_gathered_in_batches_and_tiles_exactly(tmp_path, monkeypatch, suffix):
    """The loader reads a few columns at a time and copies them in by tiles of rows: every cell lands where
    the file has it, across the batches' and tiles' edges."""
    import pandas as pd

    import training.data.datasets as datasets
    import training.data.parquet as parquet

    rng = np.random.default_rng(5)
    frame = pd.DataFrame(rng.integers(-100, 0, (61, 7)), columns=[f"w{i}" for i in range(7)])
    frame["x"], frame["y"] = rng.normal(size=61), rng.normal(size=61)
    path = tmp_path / f"d{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    monkeypatch.setattr(datasets, "GATHER_COLUMNS", 3)
    monkeypatch.setattr(parquet, "PARQUET_BATCH", 2)
    monkeypatch.setattr(datasets, "TILE_ROWS", 8)
    ds = load_csv(path, ["x", "y"])
    np.testing.assert_array_equal(ds.X, frame[[f"w{i}" for i in range(7)]].to_numpy(float))
    np.testing.assert_array_equal(ds.Y, frame[["x", "y"]].to_numpy())
    assert ds.X.flags.c_contiguous
