"""Which depth decoder of a model folder to run: the per-position one or the shared one.

A model folder may hold two depth decoders of the same frames:

    positional   depth.onnx, depth.heads.npy, offsets.npy, tree.json, device_profile.json,
                 decision.json
    shared       depth_shared.npz (shared weights, `codecspec.graphs.shared`), and from its
                 calibration depth_shared.offsets.npy, depth_shared.tree.json,
                 depth_shared.device_profile.json, depth_shared.decision.json

The decision `auto` acts on is read by `codecspec.calibrate.decision` (decision.json, or the
device profile's `speculation_pays` in a folder calibrated before that format).

The shared decoder's graph is built from depth_shared.npz when it is loaded (a fraction of a
second: the expansion is a broadcast and the builder only copies weights), so only the shared
weights are shipped. Both run through the same `DepthDecoder`.
"""

from __future__ import annotations

from pathlib import Path

import codecspec as cs
from codecspec.decode.depth import DepthDecoder

__all__ = [
    "DEPTH_KINDS",
    "SHARED_FILE",
    "SHARED_OFFSETS",
    "SHARED_TREE",
    "SHARED_PROFILE",
    "check_depth",
    "depth_files",
    "profile_path",
    "shared_decoder_from_dir",
    "open_depth_decoder",
]

DEPTH_KINDS = ("positional", "shared")
SHARED_FILE = "depth_shared.npz"
SHARED_OFFSETS = "depth_shared.offsets.npy"
SHARED_TREE = "depth_shared.tree.json"
SHARED_PROFILE = "depth_shared.device_profile.json"
POSITIONAL_FILES = ("depth.onnx", "depth.heads.npy")


def check_depth(depth) -> str:
    if not isinstance(depth, str) or depth not in DEPTH_KINDS:
        raise ValueError(f"depth: expected one of {DEPTH_KINDS}, got {depth!r}")
    return depth


def depth_files(depth: str) -> tuple:
    """Files a folder must hold to run this depth decoder."""
    return POSITIONAL_FILES if check_depth(depth) == "positional" else (SHARED_FILE,)


def profile_path(model_dir, depth: str) -> Path:
    """The calibration profile of this depth decoder in a folder; its decision is read from
    beside it (`codecspec.calibrate.decision.read_decision(profile_path(...))`)."""
    name = "device_profile.json" if check_depth(depth) == "positional" else SHARED_PROFILE
    return Path(model_dir) / name


def shared_decoder_from_dir(model_dir, **kw) -> DepthDecoder:
    """A DepthDecoder over the expanded shared graph; offsets and tree from the folder's
    depth_shared.* calibration files when present (and not given in kw)."""
    import numpy as np

    from codecspec.graphs.shared import build_shared_graph, load_shared

    d = Path(model_dir)
    if not (d / SHARED_FILE).is_file():
        raise FileNotFoundError(
            f"model_dir: no {SHARED_FILE} in {d} (the shared depth decoder; build it with "
            "`python models/recipe/v2.py shared-depth` for v2, `v3.py shared-depth --out` for v3)"
        )
    spec, arrays = load_shared(d / SHARED_FILE)
    graph, heads = build_shared_graph(spec, arrays, codebooks=_codebooks(d, spec))
    if "offsets" not in kw and (d / SHARED_OFFSETS).is_file():
        kw["offsets"] = np.load(d / SHARED_OFFSETS)
    if "tree" not in kw and (d / SHARED_TREE).is_file():
        kw["tree"] = cs.DraftTree.from_json((d / SHARED_TREE).read_text())
    kw.setdefault("heads", heads)
    return DepthDecoder(graph, **kw)


def _codebooks(model_dir: Path, spec: dict):
    """The folder's codec codebooks when the shared decoder is tied to them, else None."""
    import numpy as np

    from codecspec.graphs.shared import needs_codebooks

    if not needs_codebooks(spec):
        return None
    path = model_dir / "codec.npz"
    if not path.is_file():
        raise FileNotFoundError(
            f"model_dir: {SHARED_FILE} is tied to the codec's codebooks; no {path.name} "
            f"in {model_dir}"
        )
    with np.load(path, allow_pickle=False) as z:
        if "codebooks" not in z.files:
            raise ValueError(f"{path}: no codebooks (an RVQ codec) for the shared depth decoder")
        return z["codebooks"].astype(np.float32)


def open_depth_decoder(model_dir, depth: str = "positional", **kw) -> DepthDecoder:
    """The folder's positional (`DepthDecoder.from_dir`) or shared depth decoder."""
    if check_depth(depth) == "positional":
        return DepthDecoder.from_dir(model_dir, **kw)
    return shared_decoder_from_dir(model_dir, **kw)
