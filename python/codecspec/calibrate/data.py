"""Calibration corpus: code frames from the exact model and their teacher-forced hidden states.

When no real corpus of (talker hidden state, c0) inputs exists, the depth model is run on
synthetic inputs and its own free-generation frames become the training targets
(self-distillation): offsets then learn to predict the model's own future codes, which is
exactly what acceptance in the speculative loop measures.

Array conventions (G = num_codebooks, H = hidden_size):

    codes   int64   [N, G]     c0..c_{G-1} of each frame
    z       float32 [N, G, H]  post-norm hidden state at in-frame position p (0 = the external
                               hidden state, 1 = c0, k+1 = c_k); the node holding c_l is
                               z[:, l + 1], which head l reads to predict c_{l+1}.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

import codecspec as cs
from codecspec.graphs.config import DepthDecoderConfig, embedding_row, zero_row
from codecspec.progress import bar

log = logging.getLogger("codecspec.calibrate")

__all__ = [
    "synthetic_inputs",
    "drift_weights",
    "collect_frames",
    "teacher_forced_feeds",
    "teacher_forced_hidden",
    "read_heads",
    "open_with_heads",
    "session_config",
]


def synthetic_inputs(
    config: DepthDecoderConfig, n: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(hiddens float32 [n, H_in], c0s int64 [n]) standing in for the temporal model's output.

    The talker's final hidden state is RMS-normalised, so unit-variance Gaussian vectors have
    the right scale; c0 is drawn from the codec range shared with the depth codebooks (the
    talker's extra special ids never reach the depth model).
    """
    if int(n) <= 0:
        raise ValueError(f"n: must be > 0, got {n}")
    rng = np.random.default_rng(seed)
    hiddens = rng.standard_normal((int(n), config.input_width)).astype(np.float32)
    c0s = rng.integers(0, min(config.codebook_size, config.c0_vocab_size), size=int(n))
    return hiddens, c0s.astype(np.int64)


def drift_weights(
    config: DepthDecoderConfig,
    seed: int = 0,
    *,
    drift: float = 1.0,
    sharpness: float = 10.0,
    leak: float = 0.05,
):
    """Random weights of a small model whose drafts behave like a trained one's.

    DepthDecoderWeights.random gives a model whose future codes are unrelated to the current
    hidden state (draft top-1 near chance, nothing for offsets to learn), so calibration on it
    only exercises plumbing. Here every code table is one shared random table U plus a
    level-dependent drift `drift * level * d`, the layers barely touch the residual stream
    (o_proj / down_proj scaled by `leak`), and head h scores U + drift * h * d: codes are
    "sticky" (head reuse accepts often, like the rank-0 rates reported for Qwen3-TTS), and
    the head for a later level sees the drift it expects only after an additive shift, which
    is exactly what an offset b_j can learn.
    """
    from codecspec.graphs.weights import DepthDecoderWeights

    c = config
    if c.input_width != c.hidden_size:
        raise ValueError("drift_weights: needs input_hidden_size None (no input projection)")
    w = DepthDecoderWeights.random(c, seed)
    rng = np.random.default_rng(seed + 7919)
    H, V, G = c.hidden_size, c.codebook_size, c.num_codebooks
    U = rng.standard_normal((max(V, c.c0_vocab_size), H)).astype(np.float32)
    d = rng.standard_normal(H).astype(np.float32)
    w["c0_embedding"] = U[: c.c0_vocab_size]
    U = U[:V]
    w["code_embeddings"] = np.stack([U + drift * (lv + 1) * d for lv in range(G - 1)])
    for i in range(c.num_layers):
        w[f"layers.{i}.o_proj"] = w[f"layers.{i}.o_proj"] * leak
        w[f"layers.{i}.down_proj"] = w[f"layers.{i}.down_proj"] * leak
    w["final_norm"] = np.ones(H, np.float32)
    w["heads"] = np.stack([sharpness * (U + drift * h * d) / H for h in range(G - 1)])
    return w


def _as_decoder(decoder_or_graph, params, provider: str, threads: Optional[int], heads=None):
    from codecspec.decode.depth import DepthDecoder

    if isinstance(decoder_or_graph, DepthDecoder):
        if params is not None:
            decoder_or_graph.params = params
        return decoder_or_graph
    return DepthDecoder(
        decoder_or_graph, params=params, provider=provider, threads=threads, heads=heads
    )


def collect_frames(
    decoder_or_graph,
    hiddens,
    c0s,
    generator: cs.Generator,
    mode: str = "ar",
    *,
    params: Optional[cs.SamplingParams] = None,
    provider: str = "cpu",
    threads: Optional[int] = None,
    heads: Optional[np.ndarray] = None,
    progress: bool = True,
) -> np.ndarray:
    """Codes int64 [N, G] by free generation with the exact model.

    decoder_or_graph: a DepthDecoder (its sampling params are used unless `params` is given),
    a DepthGraph, an ONNX path or ModelProto (a DepthDecoder is opened on it; default params:
    temperature 0.9, top-k 50; `heads` for heads="hidden" graphs without a sidecar). mode "ar"
    is the reference; "spec" has the same law.
    """
    dec = _as_decoder(decoder_or_graph, params, provider, threads, heads)
    return dec.decode_frames(hiddens, c0s, generator, mode=mode, progress=progress)


# ---------------------------------------------------------------------- teacher forcing
def session_config(session) -> DepthDecoderConfig:
    """Config of a DepthGraph / DepthDecoder / onnxruntime session over a codecspec graph."""
    cfg = getattr(session, "config", None)
    if isinstance(cfg, DepthDecoderConfig):
        return cfg
    meta = session.get_modelmeta().custom_metadata_map
    if "codecspec.config" not in meta:
        raise ValueError("graph_session: not a codecspec depth graph (no codecspec metadata)")
    return DepthDecoderConfig.from_dict(json.loads(meta["codecspec.config"]))


def _raw_session(graph_session):
    """The onnxruntime.InferenceSession behind a DepthDecoder / DepthGraph / raw session."""
    s = graph_session
    if hasattr(s, "graph") and hasattr(s.graph, "session"):  # DepthDecoder
        s = s.graph
    if hasattr(s, "session"):  # DepthGraph
        s = s.session
    if not hasattr(s, "run"):
        raise ValueError(
            f"graph_session: expected a DepthGraph, DepthDecoder or InferenceSession, got "
            f"{type(graph_session).__name__}"
        )
    return s


def teacher_forced_feeds(
    config: DepthDecoderConfig, hidden: np.ndarray, codes: np.ndarray, joined: bool = False
) -> dict[str, np.ndarray]:
    """Graph inputs scoring one whole frame at once: Q = G positions (hidden, c0..c_{G-2}).
    joined: the empty past in the joined K/V layout (runtime.kv; attention="placed" graphs).

    The causal mask over a fresh cache makes position p's hidden state identical (up to
    float rounding) to the one the AR loop and the tree verify call compute for that node.
    """
    c = config
    G = c.num_codebooks
    ids = np.empty(G, np.int64)
    ids[0] = zero_row(c)
    ids[1:] = embedding_row(c, np.arange(G - 1), np.asarray(codes[: G - 1], np.int64))
    embeds = np.zeros((G, c.input_width), np.float32)
    embeds[0] = hidden
    bias = np.triu(np.full((G, G), -np.inf, np.float32), k=1)
    return {
        "input_ids": ids,
        "input_embeds": embeds,
        "position_ids": np.arange(G, dtype=np.int64),
        "attention_bias": bias,
        **_empty_past(c, joined),
        "head_ids": np.clip(np.arange(G) - 1, 0, G - 2).astype(np.int64),
        "draft_offsets": np.zeros((c.num_draft_offsets, c.hidden_size), np.float32),
    }


def _empty_past(c: DepthDecoderConfig, joined: bool) -> dict[str, np.ndarray]:
    if joined:
        return {"past_kv": np.zeros((c.num_layers, 0, 2 * c.num_kv_heads * c.head_dim), np.float32)}
    empty = np.zeros((c.num_layers, c.num_kv_heads, 0, c.head_dim), np.float32)
    return {"past_keys": empty, "past_values": empty}


def teacher_forced_hidden(
    graph_session,
    hiddens,
    c0s,
    codes,
    *,
    progress: bool = True,
) -> np.ndarray:
    """z float32 [N, G, H]: post-norm hidden states of every frame, teacher-forced.

    One graph call per frame (the graphs are batch 1) with the frame's own codes as inputs;
    only the graph's `hidden` output is fetched, so draft logits for any offsets (or Medusa
    heads) can be computed on the host from z without rerunning the model.
    """
    sess = _raw_session(graph_session)
    c = session_config(graph_session if hasattr(graph_session, "config") else sess)
    G, H = c.num_codebooks, c.hidden_size
    hiddens = np.asarray(hiddens, np.float32)
    codes = np.asarray(codes)
    c0s = np.asarray(c0s)
    N = codes.shape[0] if codes.ndim == 2 else -1
    if codes.ndim != 2 or codes.shape[1] != G or not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes: expected integer [N, {G}], got {codes.dtype} {codes.shape}")
    if hiddens.shape != (N, c.input_width):
        raise ValueError(f"hiddens: expected shape ({N}, {c.input_width}), got {hiddens.shape}")
    if c0s.shape != (N,) or np.any(c0s != codes[:, 0]):
        raise ValueError("c0s: must have shape [N] and equal codes[:, 0]")
    if np.any(codes[:, 1:] < 0) or np.any(codes[:, 1:] >= c.codebook_size):
        raise ValueError(f"codes: c1.. must be in [0, {c.codebook_size})")
    if "hidden" not in {o.name for o in sess.get_outputs()}:
        raise ValueError("graph_session: the graph has no `hidden` output")
    # heads="hidden" graphs take neither head_ids nor draft_offsets.
    names = {i.name for i in sess.get_inputs()}
    z = np.empty((N, G, H), np.float32)
    it = bar(range(N), "teacher-forced hidden", N, show=progress)
    for n in it:
        feeds = teacher_forced_feeds(c, hiddens[n], codes[n], joined="past_kv" in names)
        z[n] = sess.run(["hidden"], {k: v for k, v in feeds.items() if k in names})[0]
    return z


# ---------------------------------------------------------------------- model weights
def read_heads(model: Union[str, os.PathLike, Any]) -> np.ndarray:
    """The frozen LM heads float32 [G-1, V, H] of a codecspec depth graph.

    `model`: an ONNX path or ModelProto (heads="graph": the initializer the builder names
    `heads`; heads="hidden" path: the `<model>.heads.npy` sidecar the decoder reads), a
    DepthDecoderWeights or a dict holding "heads".
    """
    import onnx

    from codecspec.graphs.storage import read_initializer
    from codecspec.runtime.depth_graph import heads_sidecar

    if isinstance(model, dict) or (hasattr(model, "keys") and "heads" in model.keys()):
        return np.ascontiguousarray(model["heads"], np.float32)
    path = None
    if not isinstance(model, onnx.ModelProto):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"model: no such ONNX file: {path}")
        model = onnx.load(str(path), load_external_data=True)
    heads = read_initializer(model, "heads")
    if heads is not None:
        return np.ascontiguousarray(heads)
    if path is not None and heads_sidecar(path).is_file():
        return np.ascontiguousarray(np.load(heads_sidecar(path)), np.float32)
    raise ValueError(
        "model: no `heads` initializer and no <model>.heads.npy sidecar; pass the head weights"
    )


def open_with_heads(model_path, provider: str, threads, heads=None) -> tuple:
    """(the depth graph, its LM heads: `heads`, else `read_heads`), checked against each
    other before any work; FileNotFoundError naming `model` for a missing graph."""
    from codecspec.runtime.depth_graph import DepthGraph

    graph = DepthGraph(model_path, provider, threads)
    c = graph.config
    heads = read_heads(model_path) if heads is None else np.ascontiguousarray(heads, np.float32)
    want = (c.num_lm_heads, c.codebook_size, c.hidden_size)
    if heads.shape != want:
        raise ValueError(f"heads: expected shape {want}, got {heads.shape}")
    return graph, heads
