"""The FSQ model family in PyTorch ([train] extra): a temporal LM whose frame input is the
32-channel embedding interface and whose outputs are 32 channel heads + a Bernoulli stop
head, one step per frame; plus the AR-over-groups head that measures what the factorisation
costs. Inference never needs PyTorch: `export_onnx` writes the encoder and step graphs.

* **Text side**: the v1 phoneme encoder, reused as is (`encode_text`, `TemporalModel`'s).
* **Frame input** (GEPARD's stable recipe): per-channel embedding lookup (one table row range
  per channel), concatenation, a small MLP, an affine-free LayerNorm scaled to the phoneme
  embedding's std, so frame and text inputs enter the decoder at the same scale.
* **Position hint**: Fourier features of the *pace* (t + 0.5) / (P * frames_per_phoneme), a
  function of the frame index and the phoneme count only; the model is never told the
  utterance length, the stop head decides it.
* **Outputs**: one linear layer gives all channel logits side by side (Σ levels = 208 for
  8 x [8, 7, 6, 6]) and the stop logit, so `cs.sample_factorized` + `cs.sample_stop` sample
  a frame from one graph call.
* **AR-over-groups head** (`GroupARHead`, measurement only): the factorised log-probability
  of each packed group code plus a correction from a 2-layer causal transformer over the
  previous groups, given the same (detached) h_t; NLL(factorised) - NLL(AR) estimates the
  channels' multi-information given the context.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from codecspec.families.fsq.codec import FSQConfig
from codecspec.train.networks import (
    Attention,
    FeedForward,
    TemporalConfig,
    add_frame_decoder,
    add_text_encoder,
    align_bias,
    encode_text,
)
from codecspec.train.networks import fourier as fourier_features

__all__ = ["FSQModelConfig", "FSQTemporalModel", "GroupARHead", "FSQTrainModel", "export_onnx"]


@dataclasses.dataclass(frozen=True)
class FSQModelConfig:
    vocab_size: int
    num_languages: int
    num_speakers: int
    levels: tuple = (8, 7, 6, 6)
    groups: int = 8
    channel_dim: int = 16
    d_model: int = 256
    num_heads: int = 4
    ff_size: int = 768
    encoder_layers: int = 2
    decoder_layers: int = 3
    fourier_bands: int = 16
    dropout: float = 0.1
    frames_per_phoneme: float = 1.0
    ar_dim: int = 128
    ar_layers: int = 2  # 0: no AR-over-groups head (levels per group: ranges too wide for it)
    # the v3 recipe: `pace` is espeak-ng's phoneme track u_t (codecspec.frontend.aligned); the
    # frame input reads the position inside the phoneme and cross-attention gets a prior
    # centred on the phoneme being spoken, of width `align_sigma` phonemes
    aligned: bool = False
    align_sigma: float = 0.6
    # GEPARD's voice prefix: `voice_queries` (K) learned queries read a reference clip's
    # frames through `voice_blocks` Q-Former blocks; the K vectors join the text encoder's
    # input (and their mean its speaker slot). 0: voices are speaker ids (a lookup table).
    voice_queries: int = 0
    voice_blocks: int = 2

    def __post_init__(self):
        structure = FSQConfig(groups=self.groups, levels=self.levels)  # checks both
        object.__setattr__(self, "levels", structure.levels)
        if self.voice_queries and self.num_speakers != 1:
            raise ValueError("num_speakers: a voice-prefix model has one speaker row (a bias)")
        if self.ar_layers and not structure.shared:
            raise ValueError(
                "ar_layers: the AR-over-groups head needs levels shared by every group"
            )

    @functools.cached_property
    def structure(self) -> FSQConfig:
        """The codec's group structure these heads predict."""
        return FSQConfig(groups=self.groups, levels=self.levels)

    @property
    def channel_levels(self) -> tuple:
        return self.structure.channel_levels

    @property
    def channels(self) -> int:
        return len(self.channel_levels)

    @property
    def head_width(self) -> int:
        return sum(self.channel_levels)

    @property
    def packed_range(self) -> int:
        return self.structure.packed_range

    def temporal(self) -> TemporalConfig:
        """The v1 config the shared layers read; its 'c0' head is channels + stop."""
        return TemporalConfig(
            vocab_size=self.vocab_size,
            num_languages=self.num_languages,
            num_speakers=self.num_speakers,
            latent_dim=self.channels * self.channel_dim,
            d_model=self.d_model,
            num_heads=self.num_heads,
            ff_size=self.ff_size,
            encoder_layers=self.encoder_layers,
            decoder_layers=self.decoder_layers,
            draft_layers=0,
            fourier_bands=self.fourier_bands,
            c0_vocab_size=self.head_width + 1,
            dropout=self.dropout,
        )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["levels"] = self.structure.to_meta()["levels"]
        return d


def _padded_index(levels) -> torch.Tensor:
    """[C, max L] indices into [logits | -inf]: channel c's classes, then the -inf column."""
    width = sum(levels)
    idx = torch.full((len(levels), max(levels)), width, dtype=torch.long)
    off = 0
    for c, n in enumerate(levels):
        idx[c, :n] = torch.arange(off, off + n)
        off += n
    return idx


def channel_log_probs(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[..., Σ L] side-by-side channel logits -> [..., C, max L] log-probabilities (-inf pad)."""
    pad = torch.full_like(logits[..., :1], float("-inf"))
    x = torch.cat([logits, pad], dim=-1)[..., index]
    return torch.log_softmax(x, dim=-1)


class QFormerBlock(nn.Module):
    """Queries attend to each other, then to the reference frames, then an MLP (pre-norm)."""

    def __init__(self, d: int, heads: int, ff: int):
        super().__init__()
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.cross_attn = Attention(d, heads), Attention(d, heads)
        self.ff = FeedForward(d, ff)

    def forward(self, q, frames, frame_bias):
        h = self.n1(q)
        q = q + self.self_attn.attend(h, *self.self_attn.kv(h), None)
        q = q + self.cross_attn.attend(self.n2(q), *self.cross_attn.kv(frames), frame_bias)
        return q + self.ff(self.n3(q))


class VoicePrefix(nn.Module):
    """A reference clip's frames (already embedded) -> K prefix vectors; `null` is the
    learned prefix of a request without a reference. No position features: a voice is
    what the frames share, not where they are."""

    def __init__(self, cfg: FSQModelConfig):
        super().__init__()
        d, k = cfg.d_model, cfg.voice_queries
        self.queries = nn.Parameter(torch.randn(k, d) * 0.02)
        self.null = nn.Parameter(torch.randn(k, d) * 0.02)
        self.blocks = nn.ModuleList(
            QFormerBlock(d, cfg.num_heads, cfg.ff_size) for _ in range(cfg.voice_blocks)
        )
        self.norm = nn.LayerNorm(d)

    def forward(self, frames: torch.Tensor, frame_bias: torch.Tensor) -> torch.Tensor:
        """frames [B, T, D], additive key bias [B, 1, 1, T] (-inf on padding) -> [B, K, D]."""
        q = self.queries.expand(frames.shape[0], -1, -1)
        for block in self.blocks:
            q = block(q, frames, frame_bias)
        return self.norm(q)


class FSQTemporalModel(nn.Module):
    # the v1 text encoder, same parameter names (phoneme, language, speaker, text_pos,
    # encoder, enc_norm) and the same code (`encode_text`): one encoder for both families

    def __init__(self, cfg: FSQModelConfig):
        super().__init__()
        self.fsq = cfg
        self.cfg = tc = cfg.temporal()
        add_text_encoder(self, tc)
        lv = cfg.channel_levels
        self.channel_emb = nn.Embedding(sum(lv), cfg.channel_dim)
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lv)[:-1]]), dtype=torch.long)
        self.register_buffer("channel_offsets", offsets, persistent=False)
        d = tc.d_model
        self.frame_mlp = nn.Sequential(nn.Linear(tc.latent_dim, d), nn.GELU(), nn.Linear(d, d))
        self.frame_norm = nn.LayerNorm(d, elementwise_affine=False)
        add_frame_decoder(self, tc)  # bos, frame_pos, frame_speaker, decoder (head: Σ L + 1)
        self.register_buffer("log_index", _padded_index(lv), persistent=False)
        if cfg.voice_queries:
            self.voice = VoicePrefix(cfg)
            self.voice_speaker = nn.Linear(d, d)  # the prefix's mean -> the speaker slot
            nn.init.zeros_(self.voice_speaker.weight)
            nn.init.zeros_(self.voice_speaker.bias)

    # ---- voice -------------------------------------------------------------------------
    def voice_prefix(self, ref_channels, ref_lengths, use_null=None) -> torch.Tensor:
        """[B, K, D] prefix of reference clips' channels [B, T, C] (`ref_lengths` [B] real
        frames); rows where `use_null` [B] is true get the null prefix."""
        t = ref_channels.shape[1]
        valid = torch.arange(t, device=ref_channels.device)[None, :] < ref_lengths[:, None]
        bias = torch.zeros(valid.shape, device=ref_channels.device)
        bias = bias.masked_fill(~valid, float("-inf"))[:, None, None, :]
        prefix = self.voice(self.frame_embed(ref_channels), bias)
        if use_null is None:
            return prefix
        return torch.where(use_null[:, None, None], self.voice.null.expand_as(prefix), prefix)

    def null_prefix(self, batch: int) -> torch.Tensor:
        return self.voice.null.expand(batch, -1, -1)

    def encode(self, phonemes, lengths, language, speaker, prefix=None):
        """Encoder memory [B, P, D] and key mask [B, 1, 1, P]. A voice-prefix model reads
        the K `prefix` vectors [B, K, D] as extra encoder inputs (dropped from the memory,
        so the decoder's keys stay the phonemes) and their mean in the speaker slot."""
        if not self.fsq.voice_queries:
            return encode_text(
                self, phonemes, lengths, self.language(language) + self.speaker(speaker)
            )
        if prefix is None:
            raise ValueError("prefix: a voice-prefix model needs a prefix (or the null one)")
        slot = self.language(language) + self.speaker(speaker.clamp(max=0))
        slot = slot + self.voice_speaker(prefix.mean(1))
        return encode_text(self, phonemes, lengths, slot, prefix)

    # ---- frame interface ---------------------------------------------------------------
    def frame_embed(self, channels: torch.Tensor) -> torch.Tensor:
        """[..., C] channel indices -> [..., D]: lookup, concat, MLP, LayerNorm x text std."""
        e = self.channel_emb(channels + self.channel_offsets)
        x = self.frame_mlp(e.flatten(-2))
        return self.frame_norm(x) * self.phoneme.weight.std()

    def pace(self, t: torch.Tensor, ph_lengths: torch.Tensor) -> torch.Tensor:
        return (t.float() + 0.5) / (ph_lengths.float() * self.fsq.frames_per_phoneme)

    def frame_inputs(self, prev, pace, speaker):
        if self.fsq.aligned:  # the position inside the phoneme; which phoneme: cross_prior
            pace = pace - torch.floor(pace)
        x = prev + self.frame_pos(fourier_features(pace, self.cfg.fourier_bands))
        if self.fsq.voice_queries:  # one row: the voice reaches the frames through memory
            speaker = speaker.clamp(max=0)
        return x + self.frame_speaker(speaker)[:, None, :]

    def cross_prior(self, track: torch.Tensor, num_keys: int) -> torch.Tensor:
        """The aligned model's additive cross-attention prior [..., T, P] of a track [..., T]."""
        return align_bias(track, num_keys, self.fsq.align_sigma)

    def split_heads(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.fsq.head_width
        return logits[..., :w], logits[..., w]

    def forward(self, phonemes, ph_lengths, language, speaker, channels, track=None, prefix=None):
        """Teacher-forced over channels [B, T, C] (an aligned model: with its phoneme track
        [B, T]; a voice-prefix model: with its `prefix`): (hidden [B, T, D], channel logits
        [B, T, Σ L], stop logits [B, T])."""
        memory, cross_bias = self.encode(phonemes, ph_lengths, language, speaker, prefix)
        t = channels.shape[1]
        emb = self.frame_embed(channels[:, :-1])
        prev = torch.cat([torch.zeros_like(emb[:, :1]), emb], dim=1)
        prev[:, 0] = prev[:, 0] + self.bos
        if self.fsq.aligned:
            if track is None:
                raise ValueError("track: an aligned model needs the phoneme track")
            pace = track
            cross_bias = cross_bias + self.cross_prior(track, memory.shape[1]).unsqueeze(1)
        else:
            pace = self.pace(torch.arange(t, device=channels.device)[None, :], ph_lengths[:, None])
        x = self.frame_inputs(prev, pace, speaker)
        h, logits = self.decoder(x, self.decoder.cross_kv(memory), cross_bias)
        return (h, *self.split_heads(logits))

    def step(self, x, past_k, past_v, past_bias, cross_k, cross_v, cross_bias):
        """One frame for B streams: x [B, 1, D]; past_* [L, B, heads, t, hd] with additive
        past_bias [B, t] (-inf on padding); cross_bias [B, P]. Returns hidden [B, D], head
        logits [B, Σ L + 1] and this frame's K/V [L, B, heads, 1, hd]."""
        # the new frame sees itself; x[:, :, 0] is [B, 1] even when the past is empty
        self_bias = torch.cat([past_bias, torch.zeros_like(x[:, :, 0])], dim=1)
        self_bias, cross_bias = self_bias[:, None, None, :], cross_bias[:, None, None, :]
        new_k, new_v = [], []
        for i, layer in enumerate(self.decoder.layers):
            k, v = layer.self_attn.kv(layer.n1(x))
            new_k.append(k)
            new_v.append(v)
            k, v = torch.cat([past_k[i], k], dim=2), torch.cat([past_v[i], v], dim=2)
            x = layer(x, k, v, self_bias, cross_k[i], cross_v[i], cross_bias)
        h = self.decoder.norm(x)[:, 0]
        return h, self.decoder.c0_head(h), torch.stack(new_k), torch.stack(new_v)


class GroupARHead(nn.Module):
    """log p(g_k | h, g_<k) = log_softmax(base_k + delta_k(h, g_<k)) over packed group codes:
    base_k is the factorised heads' own (detached) log-probability of every code of group k,
    delta a tiny causal transformer (position k reads proj(h) + emb(g_{k-1})). delta starts
    at exactly 0, so the head starts at the factorised NLL and training can only add the
    dependencies between channels that the factorisation leaves out."""

    def __init__(self, cfg: FSQModelConfig):
        super().__init__()
        G, V, d = cfg.groups, cfg.packed_range, cfg.ar_dim
        self.G, self.per = G, len(cfg.levels)
        self.proj = nn.Linear(cfg.d_model, d)
        self.code_emb = nn.Embedding(G * V, d)  # group k's codes at rows k*V ..
        self.pos = nn.Parameter(torch.zeros(G, d))
        layer = nn.TransformerEncoderLayer(
            d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, cfg.ar_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.heads = nn.Parameter(torch.zeros(G, V, d))
        self.register_buffer("row0", torch.arange(G - 1) * V, persistent=False)
        mask = torch.full((G, G), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        digits = torch.tensor(np.indices(cfg.levels).reshape(len(cfg.levels), -1))
        self.register_buffer("digits", digits, persistent=False)  # [per, V], first level major

    def base(self, channel_lp: torch.Tensor) -> torch.Tensor:
        """[N, C, max L] channel log-probs -> [N, G, V] factorised log-prob of every code."""
        lp = channel_lp.view(len(channel_lp), self.G, self.per, -1)
        return sum(lp[:, :, j, self.digits[j]] for j in range(self.per))

    def delta(self, h: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
        """[N, G, V] corrections given h [N, D] and the true packed codes [N, G]."""
        p = self.proj(h)[:, None, :]
        prev = self.code_emb(groups[:, :-1] + self.row0)
        x = p + self.pos + torch.cat([torch.zeros_like(prev[:, :1]), prev], dim=1)
        z = self.norm(self.layers(x, mask=self.mask))
        return torch.einsum("ngd,gvd->ngv", z, self.heads)

    def forward(self, h, groups, channel_lp) -> torch.Tensor:
        return self.base(channel_lp.detach()) + self.delta(h, groups)


class FSQTrainModel(nn.Module):
    """The shipped temporal model plus the AR comparison head (fed detached h_t)."""

    def __init__(self, cfg: FSQModelConfig):
        super().__init__()
        self.cfg = cfg
        self.temporal = FSQTemporalModel(cfg)
        self.ar = GroupARHead(cfg) if cfg.ar_layers else None  # levels shared by the groups
        if self.ar is not None:
            radix = np.cumprod((cfg.levels[1:] + (1,))[::-1])[::-1].copy()  # first level major
            self.register_buffer("radix", torch.tensor(radix, dtype=torch.long), persistent=False)

    def pack(self, channels: torch.Tensor) -> torch.Tensor:
        c = channels.view(*channels.shape[:-1], self.cfg.groups, len(self.cfg.levels))
        return (c * self.radix).sum(-1)

    def losses(self, batch: dict, ar_frames: int, gen: torch.Generator) -> dict:
        """Per-frame NLLs (nats): factorised (Σ over channels), stop BCE, AR (Σ over groups,
        on up to `ar_frames` random real frames, 0 = all)."""
        m = self.temporal
        ch = batch["codes"]
        prefix = None
        if self.cfg.voice_queries:
            prefix = m.voice_prefix(batch["ref"], batch["ref_lengths"], batch["use_null"])
        h, logits, stop = m(
            batch["phonemes"],
            batch["phoneme_lengths"],
            batch["language"],
            batch["speaker"],
            ch,
            batch.get("track"),
            prefix,
        )
        mask = batch["frame_mask"]
        lp = channel_log_probs(logits[mask], m.log_index)
        tgt = ch[mask]
        per_ch = -lp.gather(-1, tgt[..., None])[..., 0]  # [N, C]
        stop_tgt = batch["stop"][mask]
        out = {
            "fact": per_ch.sum(-1).mean(),
            "stop": F.binary_cross_entropy_with_logits(stop[mask], stop_tgt),
            "channel_nll": per_ch.detach().mean(0),
        }
        if self.ar is None:
            out["ar"] = torch.zeros(())
            return out
        hv, gv = h[mask].detach(), self.pack(tgt)
        if ar_frames and ar_frames < len(hv):
            pick = torch.randperm(len(hv), generator=gen)[:ar_frames]
            hv, gv, lp = hv[pick], gv[pick], lp[pick]
        al = self.ar(hv, gv, lp)
        per_g = F.cross_entropy(al.reshape(-1, al.shape[-1]), gv.reshape(-1), reduction="none")
        out["ar"] = per_g.view(len(gv), -1).sum(-1).mean()
        return out


# ---------------------------------------------------------------------- export
class _EncoderExport(nn.Module):
    def __init__(self, tm: FSQTemporalModel):
        super().__init__()
        self.tm = tm

    def forward(self, phonemes, phoneme_lengths, language, speaker, prefix=None):
        memory, _ = self.tm.encode(phonemes, phoneme_lengths, language, speaker, prefix)
        kv = self.tm.decoder.cross_kv(memory)
        return torch.stack([k for k, _ in kv]), torch.stack([v for _, v in kv])


class _VoiceExport(nn.Module):
    """voice.onnx: one reference clip's channels [1, T, C] -> its prefix [1, K, D]."""

    def __init__(self, tm: FSQTemporalModel):
        super().__init__()
        self.tm = tm

    def forward(self, ref_channels):
        lengths = torch.ones_like(ref_channels[:, 0, 0]) * ref_channels.shape[1]
        return self.tm.voice_prefix(ref_channels, lengths)


class _StepExport(nn.Module):
    def __init__(self, tm: FSQTemporalModel):
        super().__init__()
        self.tm = tm

    def forward(
        self,
        prev_channels,
        pace,
        speaker,
        is_first,
        cross_keys,
        cross_values,
        cross_bias,
        past_keys,
        past_values,
        past_bias,
    ):
        tm = self.tm
        first = is_first[:, None]
        prev = tm.frame_embed(prev_channels) * (1.0 - first) + first * tm.bos
        if tm.fsq.aligned:  # `pace` is the track u_t: the prior over this frame's phoneme
            cross_bias = cross_bias + tm.cross_prior(pace[:, None], cross_bias.shape[1])[:, 0]
        x = tm.frame_inputs(prev[:, None, :], pace[:, None], speaker)
        h, logits, nk, nv = tm.step(
            x, past_keys, past_values, past_bias, cross_keys, cross_values, cross_bias
        )
        ch, stop = tm.split_heads(logits)
        return h, ch, stop, nk, nv


ENCODER_INPUTS = ("phonemes", "phoneme_lengths", "language", "speaker")
STEP_INPUTS = (
    "prev_channels",
    "pace",
    "speaker",
    "is_first",
    "cross_keys",
    "cross_values",
    "cross_bias",
    "past_keys",
    "past_values",
    "past_bias",
)
STEP_OUTPUTS = ("hidden", "channel_logits", "stop_logits", "new_keys", "new_values")


def _step_args(cfg: FSQModelConfig, b: int = 2, p: int = 7, t: int = 3):
    tc = cfg.temporal()
    kv = lambda n: torch.zeros(tc.decoder_layers, b, tc.num_heads, n, tc.head_dim)  # noqa: E731
    return (
        torch.zeros(b, cfg.channels, dtype=torch.long),
        torch.full((b,), 0.5),
        torch.zeros(b, dtype=torch.long),
        torch.zeros(b),
        kv(p),
        kv(p),
        torch.zeros(b, p),
        kv(t),
        kv(t),
        torch.zeros(b, t),
    )


def export_onnx(tm: FSQTemporalModel, out_dir) -> dict:
    """encoder.onnx and step.onnx, both with a dynamic batch axis B (streams); a
    voice-prefix model also voice.onnx (the encoder then takes the `prefix` input too)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tm = tm.eval()
    kw = dict(opset_version=17, dynamo=False, do_constant_folding=True)
    paths = {"encoder": out / "encoder.onnx", "step": out / "step.onnx"}
    ph = torch.ones(2, 7, dtype=torch.long)
    two = torch.zeros(2, dtype=torch.long)
    enc_args, enc_inputs = (ph, torch.full((2,), 7), two, two), list(ENCODER_INPUTS)
    enc_axes = {
        "phonemes": {0: "B", 1: "P"},
        "phoneme_lengths": {0: "B"},
        "language": {0: "B"},
        "speaker": {0: "B"},
        "cross_keys": {1: "B", 3: "P"},
        "cross_values": {1: "B", 3: "P"},
    }
    if tm.fsq.voice_queries:
        enc_args += (tm.null_prefix(2).detach().clone(),)
        enc_inputs.append("prefix")
        enc_axes["prefix"] = {0: "B"}
        paths["voice"] = out / "voice.onnx"
        torch.onnx.export(
            _VoiceExport(tm).eval(),
            (torch.zeros(1, 5, tm.fsq.channels, dtype=torch.long),),
            str(paths["voice"]),
            input_names=["ref_channels"],
            output_names=["prefix"],
            dynamic_axes={"ref_channels": {1: "T"}},
            **kw,
        )
    torch.onnx.export(
        _EncoderExport(tm).eval(),
        enc_args,
        str(paths["encoder"]),
        input_names=enc_inputs,
        output_names=["cross_keys", "cross_values"],
        dynamic_axes=enc_axes,
        **kw,
    )
    axes = {
        n: {0: "B"}
        for n in (
            "prev_channels",
            "pace",
            "speaker",
            "is_first",
            "hidden",
            "channel_logits",
            "stop_logits",
        )
    }
    axes.update({n: {1: "B", 3: "P"} for n in ("cross_keys", "cross_values")})
    axes.update({n: {1: "B", 3: "T"} for n in ("past_keys", "past_values")})
    axes.update(
        {
            "cross_bias": {0: "B", 1: "P"},
            "past_bias": {0: "B", 1: "T"},
            "new_keys": {1: "B"},
            "new_values": {1: "B"},
        }
    )
    torch.onnx.export(
        _StepExport(tm).eval(),
        _step_args(tm.fsq),
        str(paths["step"]),
        input_names=list(STEP_INPUTS),
        output_names=list(STEP_OUTPUTS),
        dynamic_axes=axes,
        **kw,
    )
    return paths
