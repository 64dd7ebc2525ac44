"""The tensors of a PyTorch checkpoint in the legacy (pre-1.6, non-zip) format, as numpy arrays,
without torch.

Some packages ship weights inside their wheel in this format (Resemblyzer's speaker encoder:
`pretrained.pt`). codecspec runs without torch, so it reads the file itself: a few pickles in a
row (magic number, protocol, system info, the object, the storage keys), then each storage's
raw bytes. The unpickler is restricted: it builds dicts, lists, tuples, OrderedDicts and
tensors and refuses every other global, so a file cannot run code while it is read.
"""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import numpy as np

__all__ = ["read_legacy_checkpoint"]

_MAGIC = 0x1950A86A20F9469CFC6C
_PROTOCOL = 1001
_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _Storage:
    """A storage named in the object pickle; its bytes follow the pickles."""

    def __init__(self, dtype, numel: int) -> None:
        self.dtype, self.numel, self.data = np.dtype(dtype), int(numel), None


class _Tensor:
    """A tensor whose storage is read after the object pickle."""

    def __init__(self, storage: _Storage, offset: int, size, stride) -> None:
        self.storage, self.offset, self.size, self.stride = storage, int(offset), size, stride

    def array(self) -> np.ndarray:
        data = self.storage.data
        item = data.itemsize
        strides = tuple(int(s) * item for s in self.stride)
        view = np.lib.stride_tricks.as_strided(
            data[self.offset :], shape=tuple(int(n) for n in self.size), strides=strides
        )
        return np.array(view)  # a copy: the storage may be shared by several tensors


def _rebuild_tensor(storage, offset, size, stride, *_rest):
    return _Tensor(storage, offset, size, stride)


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, storages: dict) -> None:
        super().__init__(f)
        self.storages = storages

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _DTYPES:
            return name
        raise pickle.UnpicklingError(f"checkpoint: refuses to build {module}.{name}")

    def persistent_load(self, pid):
        kind = pid[0]
        if kind != "storage":
            raise pickle.UnpicklingError(f"checkpoint: unknown persistent id {kind!r}")
        dtype_name, key, _location, numel, view = pid[1:6]
        if view is not None:
            raise pickle.UnpicklingError("checkpoint: storage views are not supported")
        if key not in self.storages:
            self.storages[key] = _Storage(_DTYPES[dtype_name], numel)
        return self.storages[key]


def _materialise(obj):
    if isinstance(obj, _Tensor):
        return obj.array()
    if isinstance(obj, dict):
        return type(obj)((k, _materialise(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_materialise(v) for v in obj)
    return obj


def read_legacy_checkpoint(path) -> object:
    """The object saved by `torch.save(obj, path)` (legacy format), its tensors as numpy
    arrays. Raises ValueError naming `path` for a file of another format or a truncated one."""
    path = Path(path)
    storages: dict = {}
    with open(path, "rb") as f:
        try:
            magic, protocol = pickle.load(f), pickle.load(f)
            if magic != _MAGIC or protocol != _PROTOCOL:
                raise ValueError("not a legacy PyTorch checkpoint")
            pickle.load(f)  # system info (byte order and type sizes: little-endian checked below)
            obj = _Unpickler(f, storages).load()
            keys = pickle.load(f)
            for key in keys:
                _read_storage(f, storages[key])
        except (pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:
            msg = f"path: {path} is not a readable legacy PyTorch checkpoint ({e})"
            raise ValueError(msg) from e
    return _materialise(obj)


def _read_storage(f, storage: _Storage) -> None:
    numel = int(np.frombuffer(f.read(8), "<i8")[0])
    if numel != storage.numel:
        raise ValueError(f"a storage holds {numel} elements, its tensor names {storage.numel}")
    raw = f.read(numel * storage.dtype.itemsize)
    if len(raw) != numel * storage.dtype.itemsize:
        raise ValueError("the file ends inside a storage")
    storage.data = np.frombuffer(raw, storage.dtype.newbyteorder("<"))
