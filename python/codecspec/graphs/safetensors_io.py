"""Minimal safetensors reader/writer in numpy (no torch, no `safetensors` package).

File layout: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
tensor bytes; offsets are relative to the end of the header. Read dtypes: F32, F16, BF16, F64
(all returned as float32). BF16 is the top half of a float32, so widening is a 16-bit shift.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from typing import Optional, Union

import numpy as np

__all__ = [
    "SafetensorsFile",
    "write_safetensors",
    "write_safetensors_stream",
    "bf16_round",
    "DTYPES",
]

DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}
_WRITE_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
# A header bigger than this is not a real checkpoint (the format caps it at 100 MB too).
_MAX_HEADER = 100_000_000


class SafetensorsFile:
    """Lazily reads tensors of one .safetensors file as float32 numpy arrays."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"safetensors file not found: {self.path!r}")
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ValueError(f"{self.path}: malformed safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > _MAX_HEADER or 8 + n > size:
                raise ValueError(
                    f"{self.path}: malformed safetensors header length {n} (file is {size} bytes)"
                )
            raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{self.path}: malformed safetensors header JSON ({e})") from None
        if not isinstance(header, dict):
            raise ValueError(f"{self.path}: malformed safetensors header (not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        self._data_start = 8 + n
        data_len = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, e in header.items():
            try:
                dtype = e["dtype"]
                shape = tuple(int(d) for d in e["shape"])
                begin, end = (int(o) for o in e["data_offsets"])
            except (TypeError, KeyError, ValueError):
                raise ValueError(
                    f"{self.path}: malformed header entry for tensor {name!r}"
                ) from None
            if any(d < 0 for d in shape) or not 0 <= begin <= end <= data_len:
                raise ValueError(f"{self.path}: tensor {name!r} has out-of-range offsets or shape")
            if dtype in DTYPES and end - begin != int(np.prod(shape)) * DTYPES[dtype][1]:
                raise ValueError(
                    f"{self.path}: tensor {name!r} byte length {end - begin} does not match "
                    f"{dtype} shape {list(shape)}"
                )
            self._entries[name] = (dtype, shape, begin, end)
        self._mm: Optional[np.memmap] = None

    def keys(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name)[1]

    def dtype(self, name: str) -> str:
        return self._entry(name)[0]

    def _entry(self, name: str):
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"{self.path}: no tensor {name!r}") from None

    def get(self, name: str) -> np.ndarray:
        """The tensor as a new float32 array."""
        dtype, shape, begin, end = self._entry(name)
        if dtype not in DTYPES:
            raise ValueError(
                f"{self.path}: tensor {name!r} has unsupported dtype {dtype} "
                f"(supported: {', '.join(DTYPES)})"
            )
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        buf = self._mm[self._data_start + begin : self._data_start + end]
        raw = np.frombuffer(buf, dtype=DTYPES[dtype][0])
        if dtype == "BF16":
            out = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            out = raw.astype(np.float32)
        return out.reshape(shape)

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a 2-D tensor as float32 [len(ids), cols], reading only those rows
        (an embedding lookup without loading the whole table)."""
        dtype, shape, begin, end = self._entry(name)
        if dtype not in DTYPES or len(shape) != 2:
            raise ValueError(f"{self.path}: tensor {name!r} is not a 2-D float tensor")
        ids = np.asarray(ids, np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= shape[0]):
            raise ValueError(f"{self.path}: row ids outside [0, {shape[0]}) for {name!r}")
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        np_dtype, width = DTYPES[dtype]
        buf = self._mm[self._data_start + begin : self._data_start + end]
        table = np.frombuffer(buf, dtype=np_dtype).reshape(shape)
        raw = table[ids]
        if dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)

    def close(self) -> None:
        self._mm = None


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype(np.uint16)


def write_safetensors(
    path: Union[str, os.PathLike],
    tensors: dict,
    dtype: str = "f32",
    metadata: Optional[dict] = None,
) -> None:
    """Write float arrays as F32, F16 or BF16 ("f32" | "f16" | "bf16")."""
    if dtype not in _WRITE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_WRITE_DTYPES)}, got {dtype!r}")
    st_dtype = _WRITE_DTYPES[dtype]
    header: dict = {}
    blobs = []
    offset = 0
    for name, arr in tensors.items():
        a = np.asarray(arr, dtype=np.float32)
        if st_dtype == "BF16":
            b = bf16_round(a).astype("<u2").tobytes()
        else:
            b = a.astype(DTYPES[st_dtype][0]).tobytes()
        header[name] = {
            "dtype": st_dtype,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(b)],
        }
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep tensor data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def _encode(a, st_dtype: str) -> bytes:
    a = np.asarray(a, dtype=np.float32)
    if st_dtype == "BF16":
        return bf16_round(a).astype("<u2").tobytes()
    return a.astype(DTYPES[st_dtype][0]).tobytes()


def write_safetensors_stream(
    path: Union[str, os.PathLike],
    shapes: dict,
    blocks: Callable[[str, tuple], Iterable[np.ndarray]],
    dtype: str = "f32",
    metadata: Optional[dict] = None,
    progress: Optional[Callable[[Iterable], Iterable]] = None,
) -> int:
    """Write tensors one block at a time, so a multi-GB file never sits in memory.

    shapes: name -> shape, in file order. blocks(name, shape) yields float arrays whose
    elements, in C order, fill that tensor exactly (e.g. row blocks). progress: an optional
    wrapper around the iteration over names (a progress bar). Returns the data bytes."""
    if dtype not in _WRITE_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_WRITE_DTYPES)}, got {dtype!r}")
    st_dtype = _WRITE_DTYPES[dtype]
    width = DTYPES[st_dtype][1]
    header: dict = {}
    offset = 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * width
        header[name] = {
            "dtype": st_dtype,
            "shape": [int(d) for d in shape],
            "data_offsets": [offset, offset + n],
        }
        offset += n
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    names = list(shapes)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name in progress(names) if progress else names:
            want, got = header[name]["data_offsets"], 0
            for block in blocks(name, tuple(shapes[name])):
                b = _encode(block, st_dtype)
                got += len(b)
                f.write(b)
            if got != want[1] - want[0]:
                raise ValueError(
                    f"tensor {name!r}: blocks gave {got} bytes, its shape needs {want[1] - want[0]}"
                )
    return offset
