"""Rows of a large .npy table read on demand, neither loaded nor memory-mapped.

Why not `np.load(..., mmap_mode="r")`: a mapped file's pages count in the process's resident
memory once touched, and the kernel maps neighbours of every touched page too (fault-around,
readahead). A lookup table read a few rows at a time (Qwen3-TTS's code predictor embeddings:
15 rows per frame from a 126 MB table at 0.6B) ended up almost wholly resident after a few
utterances of a server's life. `os.pread` of the rows asked for costs a system call per row
(microseconds against a frame's tens of milliseconds) and leaves resident memory alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

__all__ = ["NpyRows", "open_rows"]


class NpyRows:
    """`table[i, j, ...]` over the leading axes of a C-ordered .npy file: a fresh array of the
    remaining axes, read from disk. Safe to share between threads (pread keeps no offset)."""

    def __init__(self, path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            version = npy_format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = npy_format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = npy_format.read_array_header_2_0(f)
            self._offset = f.tell()
        if fortran or dtype.hasobject:
            raise ValueError(f"path: {path} is not a C-ordered numeric .npy table")
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self._fd = os.open(self.path, os.O_RDONLY)
        strides = np.cumprod((1,) + self.shape[::-1])[::-1][1:] * self.dtype.itemsize
        self._strides = tuple(int(s) for s in strides)

    def __getitem__(self, index) -> np.ndarray:
        index = index if isinstance(index, tuple) else (index,)
        if not 0 < len(index) <= len(self.shape):
            raise IndexError(f"index: {len(index)} indices for a {len(self.shape)}-d table")
        offset = self._offset
        for axis, i in enumerate(index):
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise IndexError(f"index: integers only, got {type(i).__name__} at axis {axis}")
            if not 0 <= int(i) < self.shape[axis]:
                raise IndexError(f"index: {int(i)} not in [0, {self.shape[axis]}) at axis {axis}")
            offset += int(i) * self._strides[axis]
        rest = self.shape[len(index) :]
        size = int(np.prod(rest, dtype=np.int64)) * self.dtype.itemsize
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise OSError(f"{self.path}: short read ({len(data)} of {size} bytes)")
        return np.frombuffer(bytearray(data), self.dtype).reshape(rest)

    def __len__(self) -> int:
        return self.shape[0]

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def open_rows(path):
    """NpyRows where the OS has `os.pread`; a read-only memory map elsewhere (Windows)."""
    if hasattr(os, "pread"):
        return NpyRows(path)
    return np.load(path, mmap_mode="r")
