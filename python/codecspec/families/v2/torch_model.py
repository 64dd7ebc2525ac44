"""Reference model v2 in PyTorch: a two-stage codec LM on codec v2 ([train] extra).

The v1 temporal model reads the previous frame's full latent, so drafted frames cannot be
verified in one call. v2 splits the frame the way VALL-E-style codec LMs do
(docs/reference_model_v2.md):

* **temporal LM** — the v1 phoneme encoder (non-causal, with language and speaker), and a
  causal frame decoder whose input at frame t is the embedding of c0_{t-1} only (row V = the
  start token), plus Fourier features of an *expected* progress (t + 0.5) / (r * P), where r
  (frames per phoneme) is an input: at training r = T / P times a log-normal jitter, so the
  model cannot read the end off the progress feature alone, and at synthesis r is the speaking
  rate control. Self-attention is causal over a sliding window of `window` frames (frame t
  sees frames t-W+1..t), trained with that band mask so a ring-buffer cache of W frames gives
  the trained outputs exactly. Outputs: h_t (the depth decoder's input), c0 logits and a
  Bernoulli stop logit (frame t is the last frame).
* **draft LM** — the same inputs and outputs with one decoder layer of its own, trained on a
  mix of cross-entropy and distillation (KL from the target's c0 distribution).
* **depth decoder** — v1's Qwen3-TTS-layout code predictor
  (`codecspec.train.networks.DepthModel`) on h_t and c0; every v2 level has the same number
  of codes, as that layout needs.

`export_onnx` writes encoder.onnx and the two step graphs with fixed-shape ring-cache inputs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from codecspec.graphs.config import DepthDecoderConfig
from codecspec.train.common import depth_losses
from codecspec.train.networks import (
    DecoderLayer,
    DepthModel,
    TemporalModel,
    add_text_encoder,
    align_bias,
    fourier,
)

__all__ = [
    "V2TemporalConfig",
    "V2Temporal",
    "V2Model",
    "band_bias",
    "export_onnx",
    "STEP_INPUTS",
    "STEP_OUTPUTS",
]

NEG = -1e9  # additive mask value: finite, so a row can never turn into NaN
# Ring-cache slots beyond the window: a draft LM writes up to `draft_len` frames that may be
# rejected; with this slack their slots never evict a frame the window still needs (frame t
# lives in slot t % capacity), for draft lengths up to CACHE_SLACK + 1.
CACHE_SLACK = 8


@dataclasses.dataclass(frozen=True)
class V2TemporalConfig:
    vocab_size: int
    num_languages: int
    num_speakers: int
    c0_vocab_size: int = 1024
    d_model: int = 256
    num_heads: int = 4
    ff_size: int = 768
    encoder_layers: int = 2
    decoder_layers: int = 3
    draft_layers: int = 1
    fourier_bands: int = 16
    window: int = 64
    dropout: float = 0.1
    # a second draft trained on cross-entropy alone, beside the distilled one: the ablation
    # of distillation at full training length for ~5% more compute (not exported)
    ce_draft: bool = False
    # v3: `progress` is the phoneme track u_t of `codecspec.frontend.aligned` (espeak-ng's timing):
    # the frame input reads the position inside the phoneme and cross-attention gets a prior
    # centred on the phoneme being spoken, of width `align_sigma` phonemes
    aligned: bool = False
    align_sigma: float = 0.6
    # the target's stop head: 0 = linear on h_t; k > 0 = one hidden SiLU layer of width k,
    # which can tell the frames past a track's end from its last frames (a linear head on
    # the same h_t cannot without stopping early: docs/reference_model_v3.md)
    stop_hidden: int = 0

    def __post_init__(self):
        if not 1 <= self.window <= 128:
            raise ValueError(f"window: expected 1..128 frames, got {self.window}")
        if isinstance(self.stop_hidden, bool) or not isinstance(self.stop_hidden, int):
            raise ValueError(f"stop_hidden: expected an int >= 0, got {self.stop_hidden!r}")
        if self.stop_hidden < 0:
            raise ValueError(f"stop_hidden: expected an int >= 0, got {self.stop_hidden}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def start_token(self) -> int:
        """The c0 input row that stands for 'no previous frame'."""
        return self.c0_vocab_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def band_bias(positions: torch.Tensor, key_positions: torch.Tensor, window: int) -> torch.Tensor:
    """Additive mask [n, m]: query at position p sees keys at q with 0 <= p - q < window
    (keys with a negative position are empty cache slots)."""
    d = positions[:, None] - key_positions[None, :]
    ok = (d >= 0) & (d < window) & (key_positions[None, :] >= 0)
    return torch.where(ok, torch.zeros((), dtype=torch.float32), torch.full((), NEG))


def stop_head(width: int, hidden: int) -> nn.Module:
    """The stop logit of h_t: linear (hidden 0) or through one SiLU layer of `hidden` units."""
    if hidden == 0:
        return nn.Linear(width, 1)
    return nn.Sequential(nn.Linear(width, hidden), nn.SiLU(), nn.Linear(hidden, 1))


class V2FrameDecoder(nn.Module):
    """Decoder layers with their own final norm, c0 head and stop head (target or draft)."""

    def __init__(self, cfg: V2TemporalConfig, layers: int, stop_hidden: int = 0):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.c0_head = nn.Linear(cfg.d_model, cfg.c0_vocab_size)
        self.stop_head = stop_head(cfg.d_model, stop_hidden)

    def cross_kv(self, memory):
        return [layer.cross_attn.kv(memory) for layer in self.layers]

    def _out(self, x):
        h = self.norm(x)
        return h, self.c0_head(h), self.stop_head(h)[..., 0]

    def forward(self, x, cross, cross_bias, self_bias):
        """Teacher-forced over whole sequences x [B, T, D]; self_bias [T, T] (the band)."""
        for layer, (ck, cv) in zip(self.layers, cross):
            k, v = layer.self_attn.kv(layer.n1(x))
            x = layer(x, k, v, self_bias, ck, cv, cross_bias)
        return self._out(x)

    def step(self, x, cache_k, cache_v, bias, cross_k, cross_v, cross_bias=None):
        """n new frames x [1, n, D] over a cache [L, 1, heads, W, hd]; bias [n, W + n].
        Returns hidden, c0 logits, stop logits and the new frames' K/V [L, 1, heads, n, hd]."""
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            k, v = layer.self_attn.kv(layer.n1(x))
            new_k.append(k)
            new_v.append(v)
            k = torch.cat([cache_k[i], k], dim=2)
            v = torch.cat([cache_v[i], v], dim=2)
            x = layer(x, k, v, bias, cross_k[i], cross_v[i], cross_bias)
        h, logits, stop = self._out(x)
        return h, logits, stop, torch.stack(new_k), torch.stack(new_v)


class V2Temporal(nn.Module):
    def __init__(self, cfg: V2TemporalConfig):
        super().__init__()
        self.cfg = cfg
        add_text_encoder(self, cfg)
        d = cfg.d_model
        self.c0_in = nn.Embedding(cfg.c0_vocab_size + 1, d)
        self.frame_pos = nn.Linear(2 * cfg.fourier_bands, d)
        self.frame_speaker = nn.Embedding(cfg.num_speakers, d)
        self.decoder = V2FrameDecoder(cfg, cfg.decoder_layers, cfg.stop_hidden)
        self.draft = V2FrameDecoder(cfg, cfg.draft_layers)
        if cfg.ce_draft:
            self.draft_ce = V2FrameDecoder(cfg, cfg.draft_layers)

    encode = TemporalModel.encode  # the same phoneme encoder as v1

    def frame_inputs(self, prev_tokens, progress, speaker):
        """prev_tokens [B, T] (start_token on the first frame), progress [B, T], speaker [B]."""
        if self.cfg.aligned:  # the position inside the phoneme; which phoneme: cross_prior
            progress = progress - torch.floor(progress)
        x = self.c0_in(prev_tokens) + self.frame_pos(fourier(progress, self.cfg.fourier_bands))
        return x + self.frame_speaker(speaker)[:, None, :]

    def cross_prior(self, progress, num_keys: int):
        """The aligned model's cross-attention prior [B, 1, T, P] (None for v2)."""
        if not self.cfg.aligned:
            return None
        return align_bias(progress, num_keys, self.cfg.align_sigma).unsqueeze(1)

    def forward(self, phonemes, ph_lengths, language, speaker, c0, frames_per_phoneme, track=None):
        """Teacher-forced on target c0 [B, T]. frames_per_phoneme [B] is the rate input r;
        track [B, T] the phoneme track of an aligned model (which ignores r).
        Returns (hidden, c0 logits, stop logits) of the target and (c0, stop) of the draft."""
        memory, cross_bias = self.encode(phonemes, ph_lengths, language, speaker)
        b, t = c0.shape
        prev = torch.cat([torch.full_like(c0[:, :1], self.cfg.start_token), c0[:, :-1]], dim=1)
        idx = torch.arange(t, device=c0.device)
        if self.cfg.aligned:
            if track is None:
                raise ValueError("track: an aligned model needs the phoneme track")
            progress = track
            cross_bias = cross_bias + self.cross_prior(track, memory.shape[1])
        else:
            denom = frames_per_phoneme[:, None] * (ph_lengths[:, None].float() - 2.0).clamp(min=1.0)
            progress = (idx[None, :].float() + 0.5) / denom
        x = self.frame_inputs(prev, progress, speaker)
        band = band_bias(idx, idx, self.cfg.window)
        h, logits, stop = self.decoder(x, self.decoder.cross_kv(memory), cross_bias, band)
        _, d_logits, d_stop = self.draft(x, self.draft.cross_kv(memory), cross_bias, band)
        if not self.cfg.ce_draft:
            return h, logits, stop, d_logits, d_stop, None
        _, ce_logits, _ = self.draft_ce(x, self.draft_ce.cross_kv(memory), cross_bias, band)
        return h, logits, stop, d_logits, d_stop, ce_logits


class V2Model(nn.Module):
    def __init__(self, tcfg: V2TemporalConfig, dcfg: DepthDecoderConfig):
        super().__init__()
        if dcfg.input_width != tcfg.d_model:
            raise ValueError(
                f"depth config: input width {dcfg.input_width} != temporal d_model {tcfg.d_model}"
            )
        if dcfg.c0_vocab_size != tcfg.c0_vocab_size:
            raise ValueError("depth config: c0 vocabulary differs from the temporal LM's")
        self.temporal = V2Temporal(tcfg)
        self.depth = DepthModel(dcfg)

    def losses(self, batch: dict, depth_frames: int, gen: torch.Generator, distill: float = 0.5):
        """Cross-entropies of c0 (target; draft mixed with distillation), the stop heads'
        binary cross-entropy, and depth CE over `depth_frames` random real frames."""
        t = self.temporal
        h, logits, stop, d_logits, d_stop, ce_logits = t(
            batch["phonemes"],
            batch["phoneme_lengths"],
            batch["language"],
            batch["speaker"],
            batch["codes"][..., 0],
            batch["frames_per_phoneme"],
            batch.get("track"),
        )
        mask, codes = batch["frame_mask"], batch["codes"]
        c0 = codes[..., 0][mask]
        last = batch["is_last"][mask].float()
        lt, ld = logits[mask], d_logits[mask]
        teacher = F.softmax(lt.detach(), dim=-1)
        kl = (teacher * (torch.log(teacher + 1e-12) - F.log_softmax(ld, -1))).sum(-1).mean()
        ce_d = F.cross_entropy(ld, c0)
        out = {
            "c0": F.cross_entropy(lt, c0),
            "draft_c0": ce_d,
            "draft_kl": kl,
            "draft": (1.0 - distill) * ce_d + distill * kl,
            "stop": F.binary_cross_entropy_with_logits(stop[mask], last),
            "draft_stop": F.binary_cross_entropy_with_logits(d_stop[mask], last),
        }
        with torch.no_grad():  # the temporal acceptance sum(min(p, q)) at T = 1
            out["accept"] = torch.minimum(teacher, F.softmax(ld, -1)).sum(-1).mean()
        if ce_logits is not None:
            lc = ce_logits[mask]
            out["ce_draft_c0"] = F.cross_entropy(lc, c0)
            with torch.no_grad():
                out["ce_accept"] = torch.minimum(teacher, F.softmax(lc, -1)).sum(-1).mean()
        out.update(depth_losses(self.depth, h[mask], codes[mask], depth_frames, gen))
        return out


# ---------------------------------------------------------------------- export
class _StepExport(nn.Module):
    """n frames over a ring cache of W slots (see STEP_INPUTS)."""

    def __init__(self, tm: V2Temporal, decoder: V2FrameDecoder):
        super().__init__()
        self.tm, self.dec, self.window = tm, decoder, tm.cfg.window

    def forward(
        self,
        prev_tokens,
        progress,
        positions,
        speaker,
        cross_k,
        cross_v,
        cache_k,
        cache_v,
        cache_positions,
    ):
        x = self.tm.frame_inputs(prev_tokens[None], progress[None], speaker)
        keys = torch.cat([cache_positions, positions])
        bias = band_bias(positions, keys, self.window)
        # a new frame must not see later new frames (positions are increasing)
        prior = self.tm.cross_prior(progress[None], cross_k.shape[3])
        h, logits, stop, nk, nv = self.dec.step(x, cache_k, cache_v, bias, cross_k, cross_v, prior)
        return h[0], logits[0], stop[0], nk, nv


STEP_INPUTS = (
    "prev_tokens",  # int64 [n]: c0 of the frame before each new frame (start token first)
    "progress",  # float32 [n]: (t + 0.5) / (r * P)
    "positions",  # int64 [n]: absolute frame index t of each new frame, increasing
    "speaker",  # int64 [1]
    "cross_keys",  # float32 [L, 1, heads, P, hd]
    "cross_values",
    "cache_keys",  # float32 [L, 1, heads, C, hd]: the ring cache, C = W + CACHE_SLACK
    "cache_values",
    "cache_positions",  # int64 [C]: frame index held by each slot, -1 = empty
)
STEP_OUTPUTS = ("hidden", "c0_logits", "stop_logits", "new_keys", "new_values")


def export_onnx(tm: V2Temporal, out_dir) -> dict:
    """encoder.onnx (both decoders' cross K/V), temporal.onnx and draft_temporal.onnx."""
    from codecspec.train.networks import EXPORT_KW, export_encoder

    out = Path(out_dir)
    tm = tm.eval()
    cfg = tm.cfg
    one = torch.zeros(1, dtype=torch.long)
    kw = EXPORT_KW
    paths = {"encoder": export_encoder(tm, out)}
    W = cfg.window + CACHE_SLACK  # the cache capacity
    for name, dec in (("temporal", tm.decoder), ("draft_temporal", tm.draft)):
        L = len(dec.layers)
        cross = torch.zeros(L, 1, cfg.num_heads, 7, cfg.head_dim)
        cache = torch.zeros(L, 1, cfg.num_heads, W, cfg.head_dim)
        n = 3
        args = (
            torch.zeros(n, dtype=torch.long),
            torch.full((n,), 0.5),
            torch.arange(n, dtype=torch.long) + W,
            one,
            cross,
            cross,
            cache,
            cache,
            torch.arange(W, dtype=torch.long),
        )
        paths[name] = out / f"{name}.onnx"
        torch.onnx.export(
            _StepExport(tm, dec).eval(),
            args,
            str(paths[name]),
            input_names=list(STEP_INPUTS),
            output_names=list(STEP_OUTPUTS),
            dynamic_axes={
                "prev_tokens": {0: "n"},
                "progress": {0: "n"},
                "positions": {0: "n"},
                "cross_keys": {3: "P"},
                "cross_values": {3: "P"},
                "new_keys": {3: "n"},
                "new_values": {3: "n"},
            },
            **kw,
        )
        _stamp_window(paths[name], cfg.window)
    return paths


def _stamp_window(path: Path, window: int) -> None:
    """Record the attention window baked into a step graph's mask in its metadata (the cache
    input's size is the capacity, which may be larger)."""
    import onnx

    from codecspec.families.v2.model import WINDOW_KEY

    m = onnx.load(str(path))
    entry = m.metadata_props.add()
    entry.key, entry.value = WINDOW_KEY, str(int(window))
    onnx.save(m, str(path))


def jittered_rate(frames: np.ndarray, phonemes: np.ndarray, sigma: float, rng) -> np.ndarray:
    """The rate input r = T / P of each utterance times exp(N(0, sigma^2))."""
    r = frames / np.maximum(phonemes, 1)
    return (r * np.exp(sigma * rng.standard_normal(len(r)))).astype(np.float32)
