"""Warm start for v2/v3 training ([train] extra): a `V2Model`'s weights read back from a
shipped model folder (issue 29).

Checkpoints live outside the repository and a fresh machine has none; the shipped folder is
the one copy of the trained weights that every machine has. Its graphs hold the weights in the
exporters' layouts: torch's ONNX export transposes Linear weights into anonymous `onnx::MatMul_*`
initializers, `build_depth_graph` fuses q/k/v, gate/up and the embedding tables, and
`store_float16` keeps every large tensor as float16 (the depth heads, in `depth.heads.npy`,
are also rounded to bfloat16-exact values). Rather than hand-writing the inverse of each
layout, `load_folder_weights` runs the same exports on a *fingerprinted* model whose every
parameter element holds its own index as a float32 bit pattern, and reads, for each element
of each exported tensor, which parameter element it came from. Float16 storage is the only
loss: the loaded weights are the shipped model's rounded ones, which is what the folder runs
(`codecspec.graphs.storage`), not the float32 checkpoint it was exported from.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from codecspec.families.v2.torch_model import V2Model, export_onnx
from codecspec.graphs import build_depth_graph
from codecspec.train.networks import depth_weights

__all__ = [
    "load_folder_weights",
    "reexport_mismatches",
    "shipped_heldout",
    "heldout_mismatches",
    "TEMPORAL_GRAPHS",
]

TEMPORAL_GRAPHS = ("encoder", "temporal", "draft_temporal")
HEADS_FILE = "depth.heads.npy"
# Fingerprints are float32 bit patterns from 2^33 up: no constant an exporter writes (norms,
# RoPE tables, masks, scales) comes near, so an element either decodes to a parameter element
# or is a constant of the graph.
_BASE = np.uint32(0x50000000)
_F16_SUFFIX = "_f16"  # what store_float16 appends to the name of a tensor it stores as float16


def _fingerprint(model: V2Model) -> dict:
    """Overwrite every parameter with its element indices (as bit patterns); returns
    {name: (offset, numel)}."""
    spans, off = {}, 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = p.numel()
            bits = (np.arange(off, off + n, dtype=np.uint32) + _BASE).view(np.float32)
            p.copy_(torch.from_numpy(bits.reshape(tuple(p.shape))))
            spans[name] = (off, n)
            off += n
    return spans


def _fingerprint_tensors(model: V2Model, tmp: Path) -> dict:
    """{graph name: [(initializer name, array)]} of the fingerprinted model's exports, in file
    order, plus the depth heads as one more tensor."""
    export_onnx(model.temporal, tmp)
    out = {g: _initializers(onnx.load(str(tmp / f"{g}.onnx"))) for g in TEMPORAL_GRAPHS}
    w = depth_weights(model.depth)
    out["depth"] = _initializers(build_depth_graph(model.depth.c, w, heads="hidden"))
    out[HEADS_FILE] = [("heads", np.asarray(w["heads"], np.float32))]
    return out


def _initializers(m: onnx.ModelProto) -> list:
    return [(i.name, numpy_helper.to_array(i)) for i in m.graph.initializer]


def _folder_tensors(folder: Path) -> dict:
    """The same lists read from a model folder (float16-stored names without their suffix)."""
    out = {}
    for g in TEMPORAL_GRAPHS + ("depth",):
        rows = _initializers(onnx.load(str(folder / f"{g}.onnx")))
        out[g] = [(n.removesuffix(_F16_SUFFIX), a) for n, a in rows]
    out[HEADS_FILE] = [("heads", np.load(folder / HEADS_FILE))]
    return out


def _pairs(mine: dict, theirs: dict):
    """(graph, name, fingerprint array, folder array) in file order; ValueError when the two
    exports differ in structure (another exporter or model layout made the folder)."""
    for g, rows in mine.items():
        other = theirs[g]
        if len(rows) != len(other):
            raise ValueError(f"{g}: {len(other)} tensors in the folder, {len(rows)} exported here")
        for (n, a), (m, b) in zip(rows, other):
            anonymous = n.startswith("onnx::") and m.startswith("onnx::")
            if (n != m and not anonymous) or a.shape != b.shape:
                raise ValueError(f"{g}: folder tensor {m} {b.shape} vs exported {n} {a.shape}")
            yield g, n, a, b


def _split(a: np.ndarray, b: np.ndarray, total: int):
    """(parameter element indices, folder values) of the fingerprinted elements of `a`; the
    other elements are the graph's constants (the input table's zero row, RoPE tables), which
    must equal the folder's (rounded to float16 where the folder stores them so)."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    if a.dtype != np.float32:
        hit = np.zeros(flat_a.shape, bool)
    else:
        bits = flat_a.view(np.uint32)
        hit = (bits >= _BASE) & (bits < _BASE + np.uint32(total))
    if not np.array_equal(flat_a[~hit].astype(b.dtype), flat_b[~hit]):
        raise ValueError("a constant differs from the folder's")
    ids = (flat_a[hit].view(np.uint32) - _BASE).astype(np.int64)
    return ids, flat_b[hit].astype(np.float32)


def _gather(pairs, total: int):
    """(values, filled) over all parameter elements; a parameter element exported twice (the
    frame embeddings of both step graphs) must read the same value in every copy."""
    values, filled = np.zeros(total, np.float32), np.zeros(total, bool)
    for g, name, a, b in pairs:
        try:
            ids, v = _split(a, b, total)
        except ValueError as e:
            raise ValueError(f"{g}: {name}: {e}") from None
        seen = filled[ids]
        if not np.array_equal(values[ids][seen], v[seen]):
            raise ValueError(f"{g}: {name} disagrees with another copy of the same weights")
        values[ids], filled[ids] = v, True
        if not np.array_equal(values[ids], v):  # one tensor holding an element twice
            raise ValueError(f"{g}: {name} holds one weight with two values")
    return values, filled


def _check_configs(model: V2Model, meta: dict) -> None:
    # ce_draft only adds a module the folder never holds; every other field shapes the weights
    mine = model.temporal.cfg.to_dict() | {"ce_draft": False}
    theirs = dict(meta.get("temporal_config", {})) | {"ce_draft": False}
    if mine != theirs or model.depth.c.to_dict() != meta.get("depth_config"):
        raise ValueError("the folder holds a model of another configuration")


def load_folder_weights(model: V2Model, folder, frontend=None) -> dict:
    """Load the weights of model folder `folder` (v2/v3 layout) into `model`.

    Returns {"loaded": [parameter names], "absent": [names the folder cannot hold]}: only
    the cross-entropy-only draft (`temporal.draft_ce`, never exported) may be absent;
    ValueError for any other parameter the folder does not give completely, and when
    `frontend` (the training data's phoneme, language and speaker tables) is not the
    folder's: the embedding rows would then stand for other symbols."""
    folder = Path(folder)
    meta = json.loads((folder / "model.json").read_text())
    _check_configs(model, meta)
    if frontend is not None and frontend.to_dict() != meta.get("frontend"):
        raise ValueError("the training data's frontend (phonemes, speakers) is not the folder's")
    work = V2Model(model.temporal.cfg, model.depth.c)
    spans = _fingerprint(work)
    total = sum(n for _, n in spans.values())
    with tempfile.TemporaryDirectory() as tmp:
        mine = _fingerprint_tensors(work, Path(tmp))
    values, filled = _gather(_pairs(mine, _folder_tensors(folder)), total)
    loaded, absent = [], []
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, (off, n) in spans.items():
            got = filled[off : off + n]
            if got.all():
                p = params[name]
                p.copy_(torch.from_numpy(values[off : off + n].reshape(tuple(p.shape))))
                loaded.append(name)
            elif not got.any() and name.startswith("temporal.draft_ce."):
                absent.append(name)
            else:
                raise ValueError(f"{name}: {int(got.sum())} of {n} values in the folder")
    return {"loaded": loaded, "absent": absent}


def reexport_mismatches(model: V2Model, folder, export: Callable) -> list:
    """Export `model` with `export(model, out_dir)` (the ship step's export, float16 storage
    included) and compare every tensor with the folder's, bit for bit: names of the tensors
    that differ (empty when the export reproduces the folder)."""
    folder = Path(folder)
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        export(model, Path(tmp))
        again = _folder_tensors(Path(tmp))
    shipped = _folder_tensors(folder)
    for g, rows in again.items():
        other = shipped[g]
        if len(rows) != len(other):
            bad.append(f"{g}: {len(rows)} tensors against {len(other)}")
            continue
        for (n, a), (m, b) in zip(rows, other):
            renamed = n != m and not (n.startswith("onnx::") and m.startswith("onnx::"))
            if renamed or a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                bad.append(f"{g}:{m}")
    return bad


def shipped_heldout(folder) -> dict:
    """The held-out losses the folder's training run ended on (its report.json), {} if none."""
    path = Path(folder) / "report.json"
    if not path.is_file():
        return {}
    val = json.loads(path.read_text()).get("train", {}).get("curves", {}).get("val", [])
    return dict(val[-1]) if val else {}


def heldout_mismatches(measured: dict, shipped: dict, tol: float, keys=("c0", "depth")) -> list:
    """Keys whose held-out loss differs from the shipped run's final figure by more than
    `tol` nats (float16 rounding moves them by a few thousandths)."""
    return [
        f"{k}: {measured[k]:.4f} against {shipped[k]:.4f}"
        for k in keys
        if k in shipped and abs(measured[k] - shipped[k]) > tol
    ]
