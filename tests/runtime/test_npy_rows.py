"""runtime.npy_rows: rows of a .npy table read per lookup, equal to numpy's own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from codecspec.runtime.npy_rows import NpyRows, open_rows


@pytest.fixture()
def table(tmp_path):
    a = np.random.default_rng(0).standard_normal((3, 7, 5)).astype(np.float32)
    np.save(tmp_path / "t.npy", a)
    return a, tmp_path / "t.npy"


def test_rows_are_numpys_rows(table):
    a, path = table
    rows = NpyRows(path)
    assert rows.shape == a.shape and rows.dtype == a.dtype and len(rows) == 3
    for i in range(3):
        np.testing.assert_array_equal(rows[i], a[i])
        for j in range(7):
            np.testing.assert_array_equal(rows[i, j], a[i, j])
            np.testing.assert_array_equal(rows[np.int64(i), np.int32(j)], a[i, j])
    out = rows[2, 6]
    out += 1.0  # a fresh, writable array: the table is not changed
    np.testing.assert_array_equal(rows[2, 6], a[2, 6])


def test_a_large_header_and_other_dtypes(tmp_path):
    a = np.arange(24, dtype=np.int16).reshape(4, 6)
    path = tmp_path / "big.npy"
    with open(path, "wb") as f:  # a version 2.0 header, as numpy writes for huge headers
        np.lib.format.write_array(f, a, version=(2, 0))
    np.testing.assert_array_equal(NpyRows(path)[3], a[3])


@pytest.mark.parametrize(
    "index, match",
    [
        ((3, 0), r"index: 3 not in \[0, 3\) at axis 0"),
        ((0, -1), r"index: -1 not in \[0, 7\) at axis 1"),
        ((0, 1, 2, 3), "4 indices for a 3-d table"),
        ((slice(0, 2),), "integers only"),
        ((True,), "integers only"),
        ((0, 1.0), "integers only"),
    ],
)
def test_bad_indices_are_refused(table, index, match):
    with pytest.raises(IndexError, match=match):
        NpyRows(table[1])[index]


def test_tables_it_cannot_read_rowwise_are_refused(tmp_path):
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((3, 4), np.float32)))
    with pytest.raises(ValueError, match="^path: .* not a C-ordered numeric"):
        NpyRows(tmp_path / "f.npy")
    np.save(tmp_path / "o.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="^path:"):
        NpyRows(tmp_path / "o.npy")


def test_threads_share_one_reader(table):
    a, path = table
    rows, bad = open_rows(path), []

    def read(k):
        for n in range(200):
            i, j = (k + n) % 3, (k * n) % 7
            if not np.array_equal(rows[i, j], a[i, j]):
                bad.append((i, j))

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
