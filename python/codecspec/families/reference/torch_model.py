"""The reference (v1) codec-LM TTS in PyTorch: its model and ONNX export ([train] extra).

`TTSModel` trains the shared temporal model (`codecspec.train.networks.TemporalModel`: text
encoder, frame decoder, draft decoder) and the depth decoder (`DepthModel`) together on the
encoded corpus (docs/reference_model.md). T comes from the text at synthesis time (frames per
phoneme, learned from the corpus), so the model needs no stop token.

Inference never needs PyTorch: `export_onnx` writes the temporal graphs (encoder.onnx,
temporal.onnx, draft_temporal.onnx) and `codecspec.train.networks.depth_weights` hands the
depth decoder to `codecspec.graphs.build_depth_graph`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from codecspec.graphs.config import DepthDecoderConfig
from codecspec.train.common import depth_losses
from codecspec.train.networks import (
    EXPORT_KW,
    DepthModel,
    FrameDecoder,
    TemporalConfig,
    TemporalModel,
    export_encoder,
)

__all__ = ["TTSModel", "export_onnx", "STEP_INPUTS", "STEP_OUTPUTS"]


class TTSModel(nn.Module):
    def __init__(self, tcfg: TemporalConfig, dcfg: DepthDecoderConfig):
        super().__init__()
        if dcfg.input_width != tcfg.d_model:
            raise ValueError(
                f"depth config: input width {dcfg.input_width} != temporal d_model {tcfg.d_model}"
            )
        self.temporal = TemporalModel(tcfg)
        self.depth = DepthModel(dcfg)

    def losses(self, batch: dict, depth_frames: int, gen: torch.Generator) -> dict:
        """Mean cross-entropies: c0 (main and draft) over all real frames; c1.. over a random
        subset of `depth_frames` real frames (the depth decoder dominates the cost)."""
        h, logits, draft_logits = self.temporal.run_batch(batch)
        mask = batch["frame_mask"]
        codes = batch["codes"]
        c0 = codes[..., 0][mask]
        out = {
            "c0": F.cross_entropy(logits[mask], c0),
            "draft_c0": F.cross_entropy(draft_logits[mask], c0),
        }
        out.update(depth_losses(self.depth, h[mask], codes[mask], depth_frames, gen))
        return out


# ---------------------------------------------------------------------- export
class _StepExport(nn.Module):
    """One decoder step: prev_latent [1, 128] (zeros = start), progress [1], speaker [1],
    is_first [1] (1.0 on the first frame), cross K/V, past K/V [L, 1, heads, t, hd]."""

    def __init__(self, tm: TemporalModel, decoder: FrameDecoder):
        super().__init__()
        self.tm, self.dec = tm, decoder

    def forward(self, prev_latent, progress, speaker, is_first, cross_k, cross_v, past_k, past_v):
        x = self.tm.frame_inputs(prev_latent[:, None, :], progress[:, None], speaker)
        x = x + is_first[:, None, None] * self.tm.bos
        h, logits, nk, nv = self.dec.step(x, past_k, past_v, cross_k, cross_v)
        return h[:, 0], logits[:, 0], nk, nv


STEP_INPUTS = (
    "prev_latent",
    "progress",
    "speaker",
    "is_first",
    "cross_keys",
    "cross_values",
    "past_keys",
    "past_values",
)
STEP_OUTPUTS = ("hidden", "c0_logits", "new_keys", "new_values")


def export_onnx(tm: TemporalModel, out_dir) -> dict:
    """Write encoder.onnx (both decoders' cross K/V), temporal.onnx and draft_temporal.onnx."""
    from pathlib import Path

    out = Path(out_dir)
    tm = tm.eval()
    cfg = tm.cfg
    one = torch.zeros(1, dtype=torch.long)
    kw = EXPORT_KW
    paths = {"encoder": export_encoder(tm, out)}
    for name, dec in (("temporal", tm.decoder), ("draft_temporal", tm.draft)):
        L = len(dec.layers)
        cross = torch.zeros(L, 1, cfg.num_heads, 7, cfg.head_dim)
        past = torch.zeros(L, 1, cfg.num_heads, 3, cfg.head_dim)
        args = (torch.zeros(1, cfg.latent_dim), torch.full((1,), 0.5), one, torch.zeros(1))
        paths[name] = out / f"{name}.onnx"
        torch.onnx.export(
            _StepExport(tm, dec).eval(),
            args + (cross, cross, past, past),
            str(paths[name]),
            input_names=list(STEP_INPUTS),
            output_names=list(STEP_OUTPUTS),
            dynamic_axes={
                "cross_keys": {3: "P"},
                "cross_values": {3: "P"},
                "past_keys": {3: "T"},
                "past_values": {3: "T"},
            },
            **kw,
        )
    return paths
