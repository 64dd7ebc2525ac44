"""codecspec's own onnxruntime operators (domain `ai.codecspec`), served by the Rust core.

`codecspec._core` is both the Python extension and an onnxruntime custom-op library: it
exports `RegisterCustomOps`, so `register(session_options)` makes its operators known to a
session. Its operators:

- `SnakeBeta(x [N, C, T], alpha, inv_beta) -> x + inv_beta * sin(alpha * x)**2` per channel
  (alpha and inv_beta hold C values each), the activation before every convolution of a
  BigVGAN-style upsampler. Written with standard operators it is five passes over the tensor
  (Mul, Sin, Mul, Mul, Add) and onnxruntime's Sin runs on one thread: on a 2-core CPU that
  was a third of the Qwen3-TTS speech decoder's time. The fused kernel is one pass with a
  vectorised sine, split over the session's thread pool; its values are the plain graph's to
  float32 rounding (its sine is within 3e-7 of the exact one for |alpha * x| <= 8, and never
  worse than the rounding of its float32 argument up to 8192; beyond that it calls the
  library sine).
- `PlacedAttention`: a depth decoder layer's attention with every row computed alone over the
  keys its bias row shows, so a verify call's rows are its AR calls' bits
  (graphs.builder, attention="placed_op"; docs/graphs.md).
- `RouteRows` / `MergeRows`: a depth decoder call's (row, draft offset) pairs gathered per LM
  head before the heads' MatMuls and put back in order after them, two nodes instead of ~90
  (docs/graphs.md, "Routed heads").

`fuse_snake(model)` rewrites the five-operator chains of a model into SnakeBeta nodes; a graph
that has them needs `register` on its session options, which is why only CPU sessions get
them (`available()` says whether this build can).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import onnx
from onnx import helper

__all__ = ["DOMAIN", "available", "library_path", "register", "fuse_snake"]

DOMAIN = "ai.codecspec"
_ENTRY = "RegisterCustomOps"


@functools.lru_cache(maxsize=1)
def library_path() -> Optional[str]:
    """The shared library that serves the operators (the core extension), or None when this
    build of it does not export onnxruntime's entry point (an older build)."""
    from codecspec import _core

    path = getattr(_core, "__file__", None)
    if not path:
        return None
    try:
        getattr(ctypes.CDLL(path), _ENTRY)
    except (OSError, AttributeError):
        return None
    return path


def available() -> bool:
    return library_path() is not None


def register(so) -> bool:
    """Adds the `ai.codecspec` operators to onnxruntime SessionOptions `so`; False (and
    nothing added) where this build cannot serve them."""
    path = library_path()
    if path is None:
        return False
    so.register_custom_ops_library(path)
    return True


def _constant(model: onnx.ModelProto, name: str) -> bool:
    return any(i.name == name for i in model.graph.initializer)


def _snake_chain(sin: onnx.NodeProto, producer: dict, consumers: dict, model) -> Optional[tuple]:
    """(x, alpha, inv_beta, output, the five nodes) when `sin` is the middle of
    x + (sin(x * alpha) * sin(x * alpha)) * inv_beta with constant alpha and inv_beta."""

    def only_user(name: str, op: str):
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and users[0].op_type == op else None

    scale = producer.get(sin.input[0])
    if scale is None or scale.op_type != "Mul" or not _constant(model, scale.input[1]):
        return None
    x, alpha = scale.input
    square = only_user(sin.output[0], "Mul")
    if square is None or list(square.input) != [sin.output[0]] * 2:
        return None
    weigh = only_user(square.output[0], "Mul")
    if weigh is None or weigh.input[0] != square.output[0] or not _constant(model, weigh.input[1]):
        return None
    add = only_user(weigh.output[0], "Add")
    if add is None or sorted(add.input) != sorted([x, weigh.output[0]]):
        return None
    if len(consumers.get(scale.output[0], [])) != 1:
        return None
    return x, alpha, weigh.input[1], add.output[0], (scale, sin, square, weigh, add)


def fuse_snake(model: onnx.ModelProto) -> int:
    """Rewrites every SnakeBeta chain of `model` (in place) into one `ai.codecspec` SnakeBeta
    node, declaring the domain; returns how many it rewrote. Initializers stay as they are
    (external data included), so the model can be saved beside its weights file."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict = {}
    for n in g.node:
        for i in dict.fromkeys(n.input):  # a node reading a value twice (s * s) counts once
            consumers.setdefault(i, []).append(n)
    fused, drop = {}, set()
    for n in g.node:
        if n.op_type != "Sin":
            continue
        chain = _snake_chain(n, producer, consumers, model)
        if chain is None:
            continue
        x, alpha, inv_beta, out, nodes = chain
        fused[id(nodes[-1])] = helper.make_node(
            "SnakeBeta", [x, alpha, inv_beta], [out], name=f"{out}_snake", domain=DOMAIN
        )
        drop.update(id(m) for m in nodes[:-1])
    if not fused:
        return 0
    # the fused node takes its Add's place: its inputs (x, constants) exist before it
    nodes = [fused.get(id(n), n) for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(nodes)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return len(fused)
