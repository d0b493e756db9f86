"""``training.data.tables``: a file's partitions hold exactly its rows, in order, whatever its line ends, and a bad
cell is named by column and line (Parquet: row)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.exceptions import InputError
from training.data import tables


def frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(-100, 0, size=n), "tag": [f"t{i % 3}" for i in range(n)]})


def read_all(path, rows, columns=("a", "b", "tag")):
    fmt = tables.table_format(path)
    names = tables.header(path, fmt)
    parts = list(tables.stream(path, fmt, names, list(columns), rows))
    return parts, pd.concat([f for _, f in parts], ignore_index=True)


@pytest.mark.parametrize("n, rows", [(1, 4), (10, 4), (12, 4), (97, 10), (50, 1)])
@pytest.mark.parametrize("ending", ["\n", "\r\n", "none"])
def test_csv_partitions_hold_every_row_once_in_order(tmp_path, n, rows, ending):
    df = frame(n)
    text = df.to_csv(index=False, lineterminator="\r\n" if ending == "\r\n" else "\n")
    if ending == "none":
        text = text.rstrip("\n")
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode())
    parts, got = read_all(path, rows)
    assert [p.first_row for p, _ in parts] == list(range(0, n, rows))
    assert all(len(f) == p.n_rows for p, f in parts) and sum(p.n_rows for p, _ in parts) == n
    pd.testing.assert_frame_equal(got, df)


def test_parquet_partitions_cross_row_groups(tmp_path):
    df = frame(103)
    path = tmp_path / "t.parquet"
    df.to_parquet(path, index=False, row_group_size=17)
    parts, got = read_all(path, 25)
    assert [p.n_rows for p, _ in parts] == [25, 25, 25, 25, 3]
    pd.testing.assert_frame_equal(got, df)


@pytest.mark.parametrize("cell, words", [("", "is empty at line 4"), ("NaN", "holds 'NaN' at line 4"),
                                         ("inf", "holds inf at line 4"), ("n/a", "holds 'n/a' at line 4")])
def test_bad_cells_are_named_by_column_and_line(tmp_path, cell, words):
    path = tmp_path / "t.csv"
    path.write_text(f"a,b,tag\n1,2,x\n3,4,y\n5,{cell},z\n7,8,w\n")
    fmt = tables.table_format(path)
    names = tables.header(path, fmt)
    parts = list(tables.stream(path, fmt, names, ["a", "b"], 2))  # the bad cell in the second partition
    tables.numeric(parts[0][1], ["a", "b"], parts[0][0], path.name)
    with pytest.raises(InputError, match=f"t.csv: column 'b' {words}") as exc:
        tables.numeric(parts[1][1], ["a", "b"], parts[1][0], path.name)
    assert exc.value.field == "b"
    assert tables.Partition("x.parquet", "parquet", 10, 5).line(2) == "row 13"


def test_formats_and_columns_are_checked(tmp_path):
    with pytest.raises(InputError, match=r"\.csv, \.csv\.gz or \.parquet"):
        tables.table_format(tmp_path / "t.xlsx")
    with pytest.raises(InputError, match="does not exist"):
        tables.table_format(tmp_path / "t.csv")
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(InputError, match="empty"):
        tables.header(tmp_path / "e.csv", "csv")
    with pytest.raises(InputError, match=r"lacks the feature column\(s\) 'c', 'd'; it has a, b"):
        tables.require_columns(tmp_path / "t.csv", ["a", "b"], {"feature": ["a", "c", "d"]})
    (tmp_path / "s.csv").write_text("a;b\n1;2\n3;4\n")
    parts, got = read_all(tmp_path / "s.csv", 1, columns=("a", "b"))  # the separator is sniffed
    assert got["b"].tolist() == [2, 4]
    (tmp_path / "r.csv").write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(InputError, match="line 2 to line 3 could not be parsed"):
        read_all(tmp_path / "r.csv", 10, columns=("a", "b"))
