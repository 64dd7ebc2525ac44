"""Half-size storage for ONNX graphs: float16 initializers that ONNX Runtime widens once.

`store_float16` replaces every large float32 initializer by a float16 copy feeding a Cast
back to float32. ONNX Runtime's constant folding runs those Casts once, when the session is
created, so the graph computes in float32 exactly as before, only with weights rounded to
float16: the file (and a wheel or model folder shipping it) is half the size. The rounded
weights *are* the model from then on; the heads sidecar of a heads="hidden" graph is rounded
the same way (`round_float16`), so host and graph agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["store_float16", "round_float16", "round_bf16_exact", "read_initializer"]

_F16_MAX = float(np.finfo(np.float16).max)


def round_float16(array, name: str = "array") -> np.ndarray:
    """float32 values rounded through float16; ValueError when a value would overflow."""
    a = np.asarray(array, dtype=np.float32)
    if np.any(np.abs(a[np.isfinite(a)]) > _F16_MAX):
        raise ValueError(f"{name}: values beyond float16 range ({_F16_MAX:g})")
    return a.astype(np.float16).astype(np.float32)


def round_bf16_exact(array, name: str = "array") -> np.ndarray:
    """float32 values exactly representable in float16 *and* bfloat16 (rounded to float16,
    then to bfloat16, nearest-even): saved as float16 without loss, and a `HeadBank` given
    them keeps one bf16 array for targets and drafts (half the bytes, identical logits)."""
    a = round_float16(array, name)
    bits = a.view(np.uint32)
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(
        0xFFFF0000
    )
    out = bits.view(np.float32)
    assert np.array_equal(out.astype(np.float16).astype(np.float32), out)
    return out


def store_float16(model: onnx.ModelProto, min_elements: int = 1024) -> onnx.ModelProto:
    """A copy of `model` whose float32 initializers with >= min_elements values are stored as
    float16 behind a Cast (small ones, e.g. norms and constants, stay float32)."""
    if not isinstance(model, onnx.ModelProto):
        raise ValueError(f"model: expected an onnx.ModelProto, got {type(model).__name__}")
    if isinstance(min_elements, bool) or not isinstance(min_elements, int) or min_elements < 1:
        raise ValueError(f"min_elements: expected a positive int, got {min_elements!r}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    used = {i.name for i in g.initializer} | {n for node in g.node for n in node.output}
    casts = []
    for init in g.initializer:
        if init.data_type != TensorProto.FLOAT or int(np.prod(init.dims)) < min_elements:
            continue
        half = round_float16(numpy_helper.to_array(init), init.name).astype(np.float16)
        stored = init.name + "_f16"
        while stored in used:
            stored += "_"
        used.add(stored)
        casts.append(helper.make_node("Cast", [stored], [init.name], to=TensorProto.FLOAT))
        init.CopyFrom(numpy_helper.from_array(half, stored))
    nodes = casts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return out


def read_initializer(model: onnx.ModelProto, name: str):
    """The float32 value of weight `name`, whether stored as is or as float16 behind the Cast
    `store_float16` adds; None when the graph has no such weight."""
    inits = {i.name: i for i in model.graph.initializer}
    if name not in inits:
        cast = next(
            (n for n in model.graph.node if n.op_type == "Cast" and list(n.output) == [name]),
            None,
        )
        if cast is None or cast.input[0] not in inits:
            return None
        name = cast.input[0]
    return numpy_helper.to_array(inits[name]).astype(np.float32)
