"""What the speech tokenizer's decoder and encoder graphs share: reading `speech_tokenizer/`'s
safetensors, the key of a cache entry (the folder's content), and building an entry so that
it exists complete or not at all."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from codecspec.graphs.safetensors_io import SafetensorsFile

__all__ = ["folder_error", "tensor_index", "content_key", "build_atomically", "cached_graph"]

_HASH_BLOCK = 1 << 23


def folder_error(folder: Path, msg: str) -> ValueError:
    return ValueError(f"speech_tokenizer_dir: {folder}: {msg}")


def tensor_index(folder: Path, required, what: str, why: str = "") -> tuple[list[Path], dict]:
    """(safetensors files, tensor name -> SafetensorsFile); ValueError naming the folder
    when a file is unreadable or a `required` tensor is absent (`what`: whose tensors;
    `why`: what they are needed for)."""
    files = sorted(folder.glob("*.safetensors"))
    where: dict[str, SafetensorsFile] = {}
    for f in files:
        try:
            st = SafetensorsFile(f)
        except ValueError as e:
            raise folder_error(folder, f"{f.name}: {e}") from None
        for name in st.keys():
            where[name] = st
    missing = [n for n in required if n not in where]
    if missing:
        raise folder_error(folder, f"{len(missing)} {what} missing, e.g. {missing[0]}{why}")
    return files, where


def content_key(tag: str, folder: Path, files: list) -> str:
    """A hash of `tag` (graph kind and version) and the folder's config and weights."""
    h = hashlib.sha256(f"{tag}\n".encode())
    for path in [folder / "config.json", *files]:
        h.update(f"{path.name}\n{path.stat().st_size}\n".encode())
        with open(path, "rb") as f:
            while block := f.read(_HASH_BLOCK):
                h.update(block)
    return h.hexdigest()[:32]


def build_atomically(entry: Path, graph_file: str, write: Callable[[Path], None]) -> None:
    """`write(tmp)` fills a temporary folder beside `entry`, which is then renamed into
    place; a concurrent builder that got there first wins (its entry is complete)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
    try:
        write(tmp)
        try:
            os.rename(tmp, entry)
        except OSError:
            if not (entry / graph_file).is_file():  # not a concurrent builder's entry
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cached_graph(root: Path, name: str, graph_file: str, build: Callable[[Path], None]) -> Path:
    """The graph file of cache entry `root/name`, built first by `build(entry)` when the
    entry is not there yet."""
    entry = root / name
    if not (entry / graph_file).is_file():
        build(entry)
    return entry / graph_file
