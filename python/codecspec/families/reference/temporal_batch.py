"""The reference (v1) family's temporal step graph for several utterances per call.

The shipped graph declares batch 1 (and bakes it into its Reshape shapes) and has no attention
mask, so it is rewritten in memory at load time (`batch_temporal_graph`): a symbolic batch
axis, Reshape shapes with -1 for the batch, and two additive biases before the self- and
cross-attention softmaxes so that streams with different frame counts and phoneme counts can
share one padded call. Attention in this model has no positional term (position enters
through `progress`), so a padded, masked key set gives the same result as the stream's own
keys. `BatchedTemporal` keeps each utterance in a slot of preallocated caches; the serving
engine runs every active stream through it, and `ReferenceTTS.generate` is that engine with
one slot (`ReferenceFamily` without limits): one stepper for both.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from codecspec.graphs.rewrite import feeds_from
from codecspec.runtime.session import open_session
from codecspec.runtime.slots import SlotCache

__all__ = ["BatchedTemporal", "batch_temporal_graph", "batched_temporal_session"]


def batch_temporal_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """The temporal step graph with a batch axis and `self_bias` [B,1,1,T+1] / `cross_bias`
    [B,1,1,P] additive attention masks (0 visible, -inf hidden)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for vi in list(g.input) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        axis = 1 if len(dims) == 5 else 0
        dims[axis].Clear()
        dims[axis].dim_param = "batch"
    reshape_shapes = {n.input[1] for n in g.node if n.op_type == "Reshape"}
    for n in g.node:
        if n.op_type == "Constant" and n.output[0] in reshape_shapes:
            v = numpy_helper.to_array(n.attribute[0].t).copy()
            if v[0] == 1:  # the baked-in batch of 1
                v[0] = -1
                n.attribute[0].t.CopyFrom(numpy_helper.from_array(v))
    del g.value_info[:]  # stale batch-1 shapes would contradict the new axis
    biases = {"self_bias": "self_len", "cross_bias": "P"}
    for name, last in biases.items():
        g.input.append(
            helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["batch", 1, 1, last])
        )
    nodes = []
    for n in g.node:
        if n.op_type == "Softmax":
            kind = "cross_bias" if "cross_keys" in feeds_from(g, n.input[0], 5) else "self_bias"
            masked = n.input[0] + "_masked"
            nodes.append(helper.make_node("Add", [n.input[0], kind], [masked]))
            n.input[0] = masked
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(m)
    return m


class BatchedTemporal(SlotCache):
    """The reference family's temporal step graph for up to `slots` streams (the shipped
    graph given a batch axis and attention masks, `batch_temporal_graph`)."""

    def __init__(self, session, slots: int, max_frames: int, max_phonemes: int):
        super().__init__(session, slots, max_frames, max_phonemes)
        self.latent_dim = {i.name: i.shape for i in session.get_inputs()}["prev_latent"][1]

    def step(self, slots, latents, progress, speakers) -> tuple[np.ndarray, np.ndarray]:
        """(hidden [n, D], c0 logits [n, V]) of the next frame of each stream in `slots`."""
        slots = np.asarray(slots, np.int64)
        t, p = self.frames[slots], self.phonemes[slots]
        tmax, pmax = self.key_lengths(t, p)  # padded: a stream's bits whatever shares the call
        n = len(slots)
        # A stream sees its own t past rows, then this frame's key (the graph appends it last).
        visible = np.arange(tmax + 1)[None, :] < t[:, None]
        visible[:, tmax] = True
        self_bias = np.where(visible, 0.0, -np.inf).astype(np.float32).reshape(n, 1, 1, -1)
        cross_bias = np.where(np.arange(pmax)[None, :] < p[:, None], 0.0, -np.inf)
        feeds = {
            "prev_latent": np.ascontiguousarray(latents, np.float32),
            "progress": np.asarray(progress, np.float32),
            "speaker": np.asarray(speakers, np.int64),
            "is_first": (t == 0).astype(np.float32),
            "cross_keys": self.cross_k[:, slots, :, :pmax],
            "cross_values": self.cross_v[:, slots, :, :pmax],
            "past_keys": self.keys[:, slots, :, :tmax],
            "past_values": self.values[:, slots, :, :tmax],
            "self_bias": self_bias,
            "cross_bias": cross_bias.astype(np.float32).reshape(n, 1, 1, pmax),
        }
        h, logits, nk, nv = self.session.run(None, feeds)
        self.keys[:, slots, :, t] = nk[:, :, :, 0].transpose(1, 0, 2, 3)
        self.values[:, slots, :, t] = nv[:, :, :, 0].transpose(1, 0, 2, 3)
        self.frames[slots] += 1
        return h, logits


def batched_temporal_session(path, provider="auto", threads=None):
    """A session of the batch-axis variant of the temporal step graph at `path`."""
    model = batch_temporal_graph(onnx.load(str(path)))
    return open_session(model.SerializeToString(), provider=provider, threads=threads)
