"""The v2 family's step graph (target or draft temporal LM, formats v2 and v3) with a batch
axis, for the engine.

The shipped step graphs score n frames of one utterance: prev_tokens/progress/positions [n],
speaker [1], cross K/V [L, 1, heads, P, hd], ring cache [L, 1, heads, C, hd] with
cache_positions [C]. Inside, the batch of 1 is an Unsqueeze on the inputs and a Gather of
index 0 on the outputs, the sliding-window mask is built from positions alone, and every
Reshape takes its batch and length from the tensor it reshapes. `batch_step_graph` rewrites
exactly those places, so B utterances with ragged row counts and phoneme counts share one
call:

- prev_tokens, progress, positions [B, n] (padded), speaker [B], cache_positions [B, C];
- the mask [B, n, C+n] gets an axis for the heads;
- a `cross_bias` [B, 1, 1, P] input (0 visible, -1e9 padding) is added before each
  cross-attention softmax;
- outputs keep the batch: hidden [B, n, D], c0_logits [B, n, V], stop_logits [B, n],
  new K/V [L, B, heads, n, hd].

Rows a stream does not use are padding past its last row: causal attention keeps them out
of its real rows. A graph that does not have this structure is refused with a ValueError.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from codecspec.graphs.rewrite import feeds_from


def _set_shape(vi, dims) -> None:
    vi.type.tensor_type.shape.Clear()
    for d in dims:
        dim = vi.type.tensor_type.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = int(d)


_REWRITES = {  # every place batch_step_graph must find; a graph missing one is refused
    "inputs_prev_tokens",
    "inputs_progress",
    "query_positions",
    "key_positions",
    "mask",
    "cross_bias",
    "out_hidden",
    "out_c0_logits",
    "out_stop_logits",
}


def batch_step_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """The step graph with a batch axis and a cross-attention bias (see the module doc)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    L, heads, cap, hd = _step_graph_dims(g)
    add = g.initializer.append
    for name, v in (("vb_axis_last", -1), ("vb_axis1", 1), ("vb_axis_m2", -2)):
        add(numpy_helper.from_array(np.array([v], np.int64), name))
    done: set = set()
    nodes, masks = _batch_nodes(g, done)
    for n in nodes:  # the scores' Adds read the mask with its heads axis
        if n.op_type == "Add":
            n.input[:] = [i + "_b" if i in masks else i for i in n.input]
    out_nodes = _bias_cross_attention(g, nodes, done)
    if not _REWRITES <= done:
        raise ValueError(f"model: not a v2 step graph (no {sorted(_REWRITES - done)})")
    del g.node[:]
    g.node.extend(out_nodes)
    _batch_inputs(g, L, heads, cap, hd)
    _batch_outputs(g, model, L, heads, hd)
    del g.value_info[:]
    onnx.checker.check_model(m)
    return m


def _step_graph_dims(g: onnx.GraphProto):
    """(layers, heads, cache capacity, head dim) from the ring cache input; refuses a graph
    without the v2 step inputs."""
    ins = {
        v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in g.input
    }  # noqa: E501
    need = {"prev_tokens", "progress", "positions", "speaker", "cross_keys", "cache_keys"}
    if not need <= set(ins) or len(ins["cache_keys"]) != 5:
        raise ValueError(f"model: not a v2 step graph (inputs {sorted(ins)})")
    L, _, heads, cap, hd = ins["cache_keys"]
    return L, heads, cap, hd


def _batch_nodes(g: onnx.GraphProto, done: set):
    """(the nodes with their batch-of-1 handling removed, the names of the masks that now
    need a heads axis). Input Unsqueezes and output Gathers become Identities, the position
    concat and the unsqueezes that build the mask from positions move to the last axes, and
    the mask gets an Unsqueeze after it. Each rewrite found is recorded in `done`."""
    outputs = {v.name for v in g.output}
    pos_concat, masks = None, set()
    nodes = []
    for n in g.node:
        if n.op_type == "Unsqueeze" and n.input[0] in ("prev_tokens", "progress"):
            n = helper.make_node("Identity", [n.input[0]], list(n.output), name=n.name)
            done.add("inputs_" + n.input[0])
        elif n.op_type == "Concat" and list(n.input) == ["cache_positions", "positions"]:
            for a in n.attribute:
                if a.name == "axis":
                    a.i = -1
            pos_concat = n.output[0]
        elif n.op_type == "Unsqueeze" and n.input[0] == "positions":
            n.input[1] = "vb_axis_last"  # query positions [B, n, 1]
            done.add("query_positions")
        elif n.op_type == "Unsqueeze" and pos_concat is not None and n.input[0] == pos_concat:
            n.input[1] = "vb_axis_m2"  # key positions [B, 1, C+n]
            done.add("key_positions")
        elif n.op_type == "Gather" and n.output[0] in outputs:
            n = helper.make_node("Identity", [n.input[0]], list(n.output), name=n.name)
            done.add("out_" + n.output[0])
        nodes.append(n)
        if n.op_type == "Where" and "positions" in feeds_from(g, n.input[0]):
            # the mask [B, n, C+n] -> [B, 1, n, C+n] against scores [B, heads, n, C+n]
            mask = n.output[0]
            nodes.append(helper.make_node("Unsqueeze", [mask, "vb_axis1"], [mask + "_b"]))
            masks.add(mask)
            done.add("mask")
    return nodes, masks


def _bias_cross_attention(g: onnx.GraphProto, nodes: list, done: set) -> list:
    """`nodes` with `cross_bias` added before every cross-attention softmax (the one whose
    scores come from cross_keys), so padded phonemes of shorter utterances get no weight."""
    out_nodes = []
    for n in nodes:
        if n.op_type == "Softmax" and "cross_keys" in feeds_from(g, n.input[0]):
            biased = n.input[0] + "_cross_masked"
            out_nodes.append(helper.make_node("Add", [n.input[0], "cross_bias"], [biased]))
            n.input[0] = biased
            done.add("cross_bias")
        out_nodes.append(n)
    return out_nodes


def _batch_inputs(g: onnx.GraphProto, L, heads, cap, hd) -> None:
    """Declare the batched input shapes and the new cross_bias input."""
    shapes = {
        "prev_tokens": ["batch", "n"],
        "progress": ["batch", "n"],
        "positions": ["batch", "n"],
        "speaker": ["batch"],
        "cross_keys": [L, "batch", heads, "P", hd],
        "cross_values": [L, "batch", heads, "P", hd],
        "cache_keys": [L, "batch", heads, cap, hd],
        "cache_values": [L, "batch", heads, cap, hd],
        "cache_positions": ["batch", cap],
    }
    for vi in g.input:
        if vi.name in shapes:
            _set_shape(vi, shapes[vi.name])
    g.input.append(
        helper.make_tensor_value_info("cross_bias", onnx.TensorProto.FLOAT, ["batch", 1, 1, "P"])
    )


def _batch_outputs(g: onnx.GraphProto, model: onnx.ModelProto, L, heads, hd) -> None:
    """Replace the outputs with batched ones; widths (hidden size, c0 vocabulary) come from the
    original model's outputs."""
    del g.output[:]
    width = {v.name: v.type.tensor_type.shape.dim[-1].dim_value for v in model.graph.output}
    D, V = width["hidden"], width["c0_logits"]
    f = onnx.TensorProto.FLOAT
    g.output.extend(
        [
            helper.make_tensor_value_info("hidden", f, ["batch", "n", D]),
            helper.make_tensor_value_info("c0_logits", f, ["batch", "n", V]),
            helper.make_tensor_value_info("stop_logits", f, ["batch", "n"]),
            helper.make_tensor_value_info("new_keys", f, [L, "batch", heads, "n", hd]),
            helper.make_tensor_value_info("new_values", f, [L, "batch", heads, "n", hd]),
        ]
    )
