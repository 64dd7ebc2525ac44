"""The PyTorch networks the phoneme-input families are trained from ([train] extra): shared.

* **temporal model** (`TemporalModel`) — a phoneme encoder (non-causal, with language and
  speaker) and a causal frame decoder that cross-attends to it, plus a one-layer draft decoder
  on the same memory. Frame t's input is the previous frame's codec latent plus Fourier
  features of its progress t / T; its output is a hidden state h_t and the logits of c0_t.
  The reference (v1) family trains it as is; v2/v3 and FSQ build their own on its encoder and
  layers (`add_text_encoder`, `DecoderLayer`, `fourier`).
* **depth decoder** (`DepthModel`, `SharedDepthModel`) — the Qwen3-TTS code-predictor layout
  codecspec's graph builder exports (`codecspec.graphs.weights`): position 0 holds h_t,
  position 1 the embedding of c0, position k+1 that of c_k; head j reads position j+1 and
  predicts c_{j+1}. `depth_weights` hands it to `codecspec.graphs.build_depth_graph`.
* **encoder export** (`export_encoder`) — encoder.onnx of any of these temporal models.

The families' own models and exports are in their packages (`codecspec.families.<name>.
torch_model`); shared training code here imports none of them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from codecspec.graphs.config import DepthDecoderConfig
from codecspec.graphs.weights import DepthDecoderWeights

__all__ = [
    "TemporalConfig",
    "TemporalModel",
    "DepthModel",
    "SharedDepthModel",
    "fourier",
    "align_bias",
    "depth_weights",
    "depth_loss",
    "export_encoder",
    "EXPORT_KW",
    "ENCODER_OUTPUTS",
]


@dataclasses.dataclass(frozen=True)
class TemporalConfig:
    vocab_size: int
    num_languages: int
    num_speakers: int
    latent_dim: int = 128
    d_model: int = 256
    num_heads: int = 4
    ff_size: int = 768
    encoder_layers: int = 2
    decoder_layers: int = 3
    draft_layers: int = 1
    fourier_bands: int = 16
    c0_vocab_size: int = 1024
    dropout: float = 0.1

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def fourier(x: torch.Tensor, bands: int) -> torch.Tensor:
    """[..., 2 * bands] sines and cosines of pi * f * x, f geometric from 0.5 to 64."""
    freqs = 2.0 ** torch.linspace(-1.0, 6.0, bands, device=x.device, dtype=x.dtype)
    ang = math.pi * x.unsqueeze(-1) * freqs
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


def align_bias(progress: torch.Tensor, num_keys: int, sigma: float) -> torch.Tensor:
    """Additive cross-attention prior [..., n, P]: -(p + 0.5 - u)^2 / (2 sigma^2) for the
    encoder position p of every key and the phoneme position u of every frame (phoneme i
    spans [i, i + 1), so its keys sit at i + 0.5)."""
    keys = torch.arange(num_keys, device=progress.device, dtype=progress.dtype) + 0.5
    d = keys - progress.unsqueeze(-1)
    return -(d * d) / (2.0 * sigma * sigma)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.hd).transpose(1, 2)

    def kv(self, mem: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.k(mem)), self.split(self.v(mem))

    def attend(self, x, k, v, bias: Optional[torch.Tensor]) -> torch.Tensor:
        q = self.split(self.q(x))
        s = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
        if bias is not None:
            s = s + bias
        a = torch.softmax(s, dim=-1) @ v
        b, _, t, _ = a.shape
        return self.o(a.transpose(1, 2).reshape(b, t, self.h * self.hd))


class FeedForward(nn.Module):
    def __init__(self, d: int, ff: int):
        super().__init__()
        self.up = nn.Linear(d, ff)
        self.down = nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TemporalConfig):
        super().__init__()
        d = cfg.d_model
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, cfg.num_heads)
        self.ff = FeedForward(d, cfg.ff_size)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, bias):
        h = self.n1(x)
        k, v = self.attn.kv(h)
        x = x + self.drop(self.attn.attend(h, k, v, bias))
        return x + self.drop(self.ff(self.n2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TemporalConfig):
        super().__init__()
        d = cfg.d_model
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = Attention(d, cfg.num_heads)
        self.cross_attn = Attention(d, cfg.num_heads)
        self.ff = FeedForward(d, cfg.ff_size)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, self_k, self_v, self_bias, cross_k, cross_v, cross_bias):
        x = x + self.drop(self.self_attn.attend(self.n1(x), self_k, self_v, self_bias))
        x = x + self.drop(self.cross_attn.attend(self.n2(x), cross_k, cross_v, cross_bias))
        return x + self.drop(self.ff(self.n3(x)))


class FrameDecoder(nn.Module):
    """A stack of decoder layers with its own final norm and c0 head (main model or draft)."""

    def __init__(self, cfg: TemporalConfig, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.c0_head = nn.Linear(cfg.d_model, cfg.c0_vocab_size)

    def cross_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [layer.cross_attn.kv(memory) for layer in self.layers]

    def forward(self, x, cross, cross_bias):
        """Teacher-forced pass over whole sequences x [B, T, D] (causal self-attention)."""
        t = x.shape[1]
        causal = torch.full((t, t), float("-inf"), device=x.device).triu(1)
        for layer, (ck, cv) in zip(self.layers, cross):
            k, v = layer.self_attn.kv(layer.n1(x))
            x = layer(x, k, v, causal, ck, cv, cross_bias)
        h = self.norm(x)
        return h, self.c0_head(h)

    def step(self, x, past_k, past_v, cross_k, cross_v):
        """One frame x [1, 1, D] with the cache of earlier frames past_* [L, 1, heads, t, hd];
        cross_* [L, 1, heads, P, hd]. Returns hidden, c0 logits and this frame's K/V."""
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            k, v = layer.self_attn.kv(layer.n1(x))
            new_k.append(k)
            new_v.append(v)
            k = torch.cat([past_k[i], k], dim=2)
            v = torch.cat([past_v[i], v], dim=2)
            x = layer(x, k, v, None, cross_k[i], cross_v[i], None)
        h = self.norm(x)
        return h, self.c0_head(h), torch.stack(new_k), torch.stack(new_v)


BATCH_KEYS = ("phonemes", "phoneme_lengths", "language", "speaker", "latents", "frame_lengths")


def encode_text(m: nn.Module, phonemes, lengths, slot, prefix=None):
    """The phoneme encoder of `m` (`add_text_encoder`'s modules): memory [B, P, D] and the
    additive key mask [B, 1, 1, P] of padding. `slot` [B, D] is added at every phoneme (the
    language and speaker); `prefix` [B, K, D], extra encoder inputs the phonemes attend to,
    dropped from the memory (the FSQ family's voice prefix)."""
    b, p = phonemes.shape
    idx = torch.arange(p, device=phonemes.device)
    valid = idx[None, :] < lengths[:, None]
    rel = (idx[None, :].float() + 0.5) / lengths[:, None].float()
    x = m.phoneme(phonemes) + m.text_pos(fourier(rel, m.cfg.fourier_bands))
    x = x + slot[:, None, :]
    bias = torch.zeros(b, 1, 1, p, device=x.device).masked_fill(
        ~valid[:, None, None, :], float("-inf")
    )
    k = 0 if prefix is None else prefix.shape[1]
    if k:
        x = torch.cat([prefix, x], dim=1)
        bias = torch.cat([torch.zeros_like(bias[..., :1]).expand(b, 1, 1, k), bias], dim=-1)
    for layer in m.encoder:
        x = layer(x, bias)
    return m.enc_norm(x)[:, k:], bias[..., k:]  # views: nothing copied when k is 0


def add_text_encoder(m: nn.Module, cfg: TemporalConfig) -> None:
    """The phoneme encoder's modules on `m` under the names `TemporalModel.encode` reads
    (shared with the FSQ family, `codecspec.families.fsq.torch_model`)."""
    d, f2 = cfg.d_model, 2 * cfg.fourier_bands
    m.phoneme = nn.Embedding(cfg.vocab_size, d)
    m.language = nn.Embedding(cfg.num_languages, d)
    m.speaker = nn.Embedding(cfg.num_speakers, d)
    m.text_pos = nn.Linear(f2, d)
    m.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
    m.enc_norm = nn.LayerNorm(d)


def add_frame_decoder(m: nn.Module, cfg: TemporalConfig) -> None:
    """The frame side after the frame input: BOS, progress and speaker inputs, the decoder."""
    d = cfg.d_model
    m.bos = nn.Parameter(torch.zeros(d))
    m.frame_pos = nn.Linear(2 * cfg.fourier_bands, d)
    m.frame_speaker = nn.Embedding(cfg.num_speakers, d)
    m.decoder = FrameDecoder(cfg, cfg.decoder_layers)


class TemporalModel(nn.Module):
    def __init__(self, cfg: TemporalConfig):
        super().__init__()
        self.cfg = cfg
        add_text_encoder(self, cfg)  # same creation order as before: same initial weights
        self.latent_in = nn.Linear(cfg.latent_dim, cfg.d_model)
        add_frame_decoder(self, cfg)
        self.draft = FrameDecoder(cfg, cfg.draft_layers)

    def encode(self, phonemes, lengths, language, speaker):
        """Encoder memory [B, P, D] and the additive key mask [B, 1, 1, P] of padding."""
        return encode_text(self, phonemes, lengths, self.language(language) + self.speaker(speaker))

    def frame_inputs(self, prev_latent, progress, speaker):
        """Decoder inputs: previous frame's latent (zeros row -> BOS), progress, speaker."""
        x = self.latent_in(prev_latent) + self.frame_pos(fourier(progress, self.cfg.fourier_bands))
        return x + self.frame_speaker(speaker)[:, None, :]

    def run_batch(self, batch: dict):
        """forward() on a batch dict (`codecspec.families.reference.train.to_tensors`)."""
        return self(*(batch[k] for k in BATCH_KEYS))

    def forward(self, phonemes, ph_lengths, language, speaker, latents, frame_lengths):
        """Teacher-forced: latents [B, T, 128] of the target frames. Returns (hidden [B,T,D],
        c0 logits [B,T,V], draft c0 logits [B,T,V])."""
        memory, cross_bias = self.encode(phonemes, ph_lengths, language, speaker)
        b, t, _ = latents.shape
        prev = torch.cat([torch.zeros_like(latents[:, :1]), latents[:, :-1]], dim=1)
        idx = torch.arange(t, device=latents.device)
        progress = (idx[None, :].float() + 0.5) / frame_lengths[:, None].float()
        x = self.frame_inputs(prev, progress, speaker)
        x[:, 0] = x[:, 0] + self.bos
        h, logits = self.decoder(x, self.decoder.cross_kv(memory), cross_bias)
        _, draft_logits = self.draft(x, self.draft.cross_kv(memory), cross_bias)
        return h, logits, draft_logits


# ---------------------------------------------------------------------- depth decoder (Qwen3)
class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class DepthLayer(nn.Module):
    def __init__(self, c: DepthDecoderConfig):
        super().__init__()
        H, hd = c.hidden_size, c.head_dim
        self.c = c
        self.input_norm = RMSNorm(H, c.rms_norm_eps)
        self.q_proj = nn.Linear(H, c.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(H, c.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(H, c.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(c.num_heads * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(hd, c.rms_norm_eps)
        self.post_norm = RMSNorm(H, c.rms_norm_eps)
        self.gate_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, H, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        n, t, _ = x.shape
        h = self.input_norm(x)
        q = self.q_norm(self.q_proj(h).view(n, t, c.num_heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(n, t, c.num_kv_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(h).view(n, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(c.kv_groups, dim=1)
        v = v.repeat_interleave(c.kv_groups, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(n, t, -1))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class DepthModel(nn.Module):
    """Qwen3-TTS-shaped code predictor with the tensor names of DepthDecoderWeights."""

    def __init__(self, c: DepthDecoderConfig):
        super().__init__()
        if c.has_input_proj:
            raise ValueError("config: the reference model feeds h_t directly (no input_proj)")
        self.c = c
        H, V, G = c.hidden_size, c.codebook_size, c.num_codebooks
        self.c0_embedding = nn.Embedding(c.c0_vocab_size, H)
        self.code_embeddings = nn.Parameter(torch.randn(G - 1, V, H) * 0.02)
        self.layers = nn.ModuleList(DepthLayer(c) for _ in range(c.num_layers))
        self.final_norm = RMSNorm(H, c.rms_norm_eps)
        self.heads = nn.Parameter(torch.randn(G - 1, V, H) * 0.02)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).double() / c.head_dim))
        ang = torch.arange(G).double()[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", emb.sin().float(), persistent=False)

    def forward(self, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Logits [N, G-1, V] of c1..c_{G-1} given h_t [N, H] and teacher codes [N, G]."""
        G = self.c.num_codebooks
        levels = torch.arange(G - 2, device=codes.device)
        rows = self.code_embeddings[levels[None, :], codes[:, 1 : G - 1]]  # [N, G-2, H]
        x = torch.cat([hidden[:, None], self.c0_embedding(codes[:, 0])[:, None], rows], dim=1)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        z = self.final_norm(x)[:, 1:]  # [N, G-1, H]: node of c_j feeds head j
        return torch.einsum("njh,jvh->njv", z, self.heads)


class SharedDepthModel(nn.Module):
    """The depth decoder with every parameter shared across RVQ levels (tied weights of the
    DepthModel layout, `codecspec.graphs.shared`): one input table (c0 too with share_c0),
    one LM head, `c.num_layers` layers; the level comes from RoPE at its position and, with
    level_embeddings, a learned vector per level added to the code embedding.

    codebooks: the codec's RVQ codebooks [G, V, D]; the table and head are then tied to them
    (`codebook_features` times a learned [D + 1, H] map in and out; per_level_head: one out
    map per level), so each level keeps its own code vectors at a small fraction of the
    weights.

    forward() computes exactly what DepthModel computes with the expanded weights
    (`expanded()`), which is what `depth_weights` exports."""

    def __init__(
        self,
        c: DepthDecoderConfig,
        share_c0: bool = True,
        level_embeddings: bool = True,
        codebooks=None,
        per_level_head: bool = False,
    ):
        super().__init__()
        from codecspec.graphs.shared import codebook_features, shared_shapes

        phi = None if codebooks is None else codebook_features(codebooks)[: c.num_codebooks]
        shapes = shared_shapes(
            c,
            share_c0,
            level_embeddings,
            codebook_features=0 if phi is None else phi.shape[-1],
            per_level_head=per_level_head,
        )  # fmt: skip  (validates the combination)
        self.c, self.share_c0, self.has_level = c, bool(share_c0), bool(level_embeddings)
        self.per_level_head = bool(per_level_head)
        self.codebooks = None if codebooks is None else np.asarray(codebooks)
        H, V, G = c.hidden_size, c.codebook_size, c.num_codebooks
        if phi is None:
            self.table = nn.Parameter(torch.randn(V, H) * 0.02)
            self.head = nn.Parameter(torch.randn(V, H) * 0.02)
        else:  # scaled so phi @ in_proj starts as small as a 0.02 table
            if phi.shape[:2] != (G, V):
                raise ValueError(f"codebooks: expected [{G}, {V}, dim], got {phi.shape}")
            self.register_buffer("phi", torch.as_tensor(phi), persistent=False)
            std = 0.02 / phi.shape[-1] ** 0.5
            self.in_proj = nn.Parameter(torch.randn(*shapes["in_proj"]) * std)
            self.out_proj = nn.Parameter(torch.randn(*shapes["out_proj"]) * std)
        if not share_c0:
            self.c0_embedding = nn.Parameter(torch.randn(c.c0_vocab_size, H) * 0.02)
        if level_embeddings:  # levels 0..G-2 (c_{G-1} is never an input)
            self.level_embeddings = nn.Parameter(torch.zeros(G - 1, H))
        self.layers = nn.ModuleList(DepthLayer(c) for _ in range(c.num_layers))
        self.final_norm = RMSNorm(H, c.rms_norm_eps)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).double() / c.head_dim))
        ang = torch.arange(G).double()[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", emb.sin().float(), persistent=False)

    @property
    def tied_to_codebooks(self) -> bool:
        return self.codebooks is not None

    def _levels(self) -> torch.Tensor:
        G, H = self.c.num_codebooks, self.c.hidden_size
        if self.has_level:
            return self.level_embeddings
        return torch.zeros(G - 1, H, device=self.final_norm.weight.device)

    def _tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input table of c0 [C0, H], of c1..c_{G-1} [G-1, V, H], heads [G-1, V, H]),
        level vectors not yet added."""
        G = self.c.num_codebooks
        if self.tied_to_codebooks:
            embed = self.phi @ self.in_proj  # [G, V, H]
            return embed[0], embed[1:], self.phi[1:] @ self.out_proj
        c0 = self.table if self.share_c0 else self.c0_embedding
        return c0, self.table[None].expand(G - 1, -1, -1), self.head[None].expand(G - 1, -1, -1)

    def expanded(self) -> dict:
        """The DepthModel tensors these parameters tie: c0_embedding [C0, H],
        code_embeddings [G-1, V, H], heads [G-1, V, H]."""
        lv = self._levels()
        c0, tables, heads = self._tables()
        tail = torch.cat([lv[1:], torch.zeros_like(lv[:1])])
        return {
            "c0_embedding": c0 + lv[0],
            "code_embeddings": tables + tail[:, None, :],
            "heads": heads,
        }

    def forward(self, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Logits [N, G-1, V] of c1..c_{G-1} given h_t [N, H] and teacher codes [N, G]."""
        G = self.c.num_codebooks
        lv = self._levels()
        c0_table, tables, heads = self._tables()
        x0 = c0_table[codes[:, 0]] + lv[0]
        levels = torch.arange(G - 2, device=codes.device)
        rows = tables[levels[None, :], codes[:, 1 : G - 1]] + lv[1:]  # [N, G-2, H]
        x = torch.cat([hidden[:, None], x0[:, None], rows], dim=1)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        z = self.final_norm(x)[:, 1:]  # [N, G-1, H]
        if self.tied_to_codebooks:
            return torch.einsum("njh,jvh->njv", z, heads)
        return z @ self.head.T  # one head for every level: one matmul

    @torch.no_grad()
    def warm_start(self, teacher: DepthModel) -> None:
        """Start from a trained per-position decoder of the same levels: its first layers and
        final norm, and (tied to codebooks) the in map and level vectors fitted by least
        squares to its input tables, the out map(s) to its heads. Distilling from that
        teacher then starts where a cold start arrives after many steps."""
        if not self.tied_to_codebooks or not self.share_c0:
            raise ValueError("warm_start: only a codebook-tied decoder (share_c0) is fitted")
        G, H, V = self.c.num_codebooks, self.c.hidden_size, self.c.codebook_size
        if teacher.c.num_layers < self.c.num_layers or teacher.c.hidden_size != H:
            raise ValueError("teacher: needs at least as many layers of the same width")
        for mine, theirs in zip(self.layers, teacher.layers):
            mine.load_state_dict(theirs.state_dict())
        self.final_norm.load_state_dict(teacher.final_norm.state_dict())
        tables = torch.cat([teacher.c0_embedding.weight[None], teacher.code_embeddings[: G - 2]])
        phi, F = self.phi[: G - 1], self.phi.shape[-1]
        onehot = torch.eye(G - 1).repeat_interleave(V, dim=0)  # the level vectors' columns
        a = torch.cat([phi.reshape(-1, F), onehot], dim=1)
        sol = torch.linalg.lstsq(a, tables.reshape(-1, H)).solution
        self.in_proj.copy_(sol[:F])
        if self.has_level:
            self.level_embeddings.copy_(sol[F:])
        if self.per_level_head:
            self.out_proj.copy_(torch.linalg.lstsq(self.phi[1:], teacher.heads).solution)
        else:
            flat = self.phi[1:].reshape(-1, F)
            self.out_proj.copy_(torch.linalg.lstsq(flat, teacher.heads.reshape(-1, H)).solution)

    def save_options(self) -> dict:
        """The keyword arguments `codecspec.graphs.shared.save_shared` needs for this model."""
        return {
            "share_c0": self.share_c0, "level_embeddings": self.has_level,
            "codebooks": self.codebooks, "per_level_head": self.per_level_head,
        }  # fmt: skip

    def shared_arrays(self) -> dict:
        """The shared tensors under `codecspec.graphs.shared` names (float32 numpy)."""

        def t(x: torch.Tensor) -> np.ndarray:
            return x.detach().cpu().float().numpy()

        out = {"final_norm": t(self.final_norm.weight)}
        if self.tied_to_codebooks:
            out |= {"in_proj": t(self.in_proj), "out_proj": t(self.out_proj)}
        else:
            out |= {"table": t(self.table), "head": t(self.head)}
        if not self.share_c0:
            out["c0_embedding"] = t(self.c0_embedding)
        if self.has_level:
            out["level_embeddings"] = t(self.level_embeddings)
        for i, layer in enumerate(self.layers):
            for name in ("input_norm", "q_norm", "k_norm", "post_norm"):
                out[f"layers.{i}.{name}"] = t(getattr(layer, name).weight)
            for name in (
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ):
                out[f"layers.{i}.{name}"] = t(getattr(layer, name).weight)
        return out


def depth_loss(model: nn.Module, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Per-frame, per-level cross-entropy [N, G-1] of a DepthModel or SharedDepthModel."""
    dl = model(hidden, codes)
    return F.cross_entropy(
        dl.reshape(-1, dl.shape[-1]), codes[:, 1:].reshape(-1), reduction="none"
    ).view(len(codes), -1)


# ---------------------------------------------------------------------- export
def depth_weights(model: DepthModel, offsets: Optional[np.ndarray] = None) -> DepthDecoderWeights:
    """The depth decoder's tensors under codecspec's names (zero draft offsets by default).
    A SharedDepthModel exports its tied tensors expanded into the same layout."""
    c = model.c

    def t(x: torch.Tensor) -> np.ndarray:
        return x.detach().cpu().float().numpy()

    w = DepthDecoderWeights()
    if isinstance(model, SharedDepthModel):
        tied = {k: t(v) for k, v in model.expanded().items()}
    else:
        tied = {
            "c0_embedding": t(model.c0_embedding.weight),
            "code_embeddings": t(model.code_embeddings),
            "heads": t(model.heads),
        }
    w["c0_embedding"] = tied["c0_embedding"]
    w["code_embeddings"] = tied["code_embeddings"]
    for i, layer in enumerate(model.layers):
        p = f"layers.{i}."
        w[p + "input_norm"] = t(layer.input_norm.weight)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            w[p + name] = t(getattr(layer, name).weight)
        w[p + "q_norm"] = t(layer.q_norm.weight)
        w[p + "k_norm"] = t(layer.k_norm.weight)
        w[p + "post_norm"] = t(layer.post_norm.weight)
    w["final_norm"] = t(model.final_norm.weight)
    w["heads"] = tied["heads"]
    w["draft_offsets"] = (
        np.zeros((c.num_draft_offsets, c.hidden_size), np.float32) if offsets is None else offsets
    )
    w.validate(c)
    return w


class _EncoderExport(nn.Module):
    """phonemes [1, P], language [1], speaker [1] -> cross K/V of the main and draft decoders."""

    def __init__(self, tm: TemporalModel):
        super().__init__()
        self.tm = tm

    def forward(self, phonemes, language, speaker):
        lengths = torch.ones_like(phonemes).sum(dim=1)  # tensor ops keep P dynamic in the trace
        memory, _ = self.tm.encode(phonemes, lengths, language, speaker)
        out = []
        for dec in (self.tm.decoder, self.tm.draft):
            kv = dec.cross_kv(memory)
            out += [torch.stack([k for k, _ in kv]), torch.stack([v for _, v in kv])]
        return tuple(out)


ENCODER_OUTPUTS = ("cross_keys", "cross_values", "draft_cross_keys", "draft_cross_values")


EXPORT_KW = dict(opset_version=17, dynamo=False, do_constant_folding=True)


def export_encoder(tm, out):
    """encoder.onnx: phonemes, language, speaker -> both decoders' cross K/V (any temporal
    model with `encode`, `decoder.cross_kv`, `draft.cross_kv`: v1's and v2's)."""
    from pathlib import Path

    path = Path(out) / "encoder.onnx"
    axes = {n: {3: "P"} for n in ENCODER_OUTPUTS}
    axes["phonemes"] = {1: "P"}
    one = torch.zeros(1, dtype=torch.long)
    torch.onnx.export(
        _EncoderExport(tm).eval(),  # eval wrappers: export restores their mode afterwards
        (torch.ones(1, 7, dtype=torch.long), one, one),
        str(path),
        input_names=["phonemes", "language", "speaker"],
        output_names=list(ENCODER_OUTPUTS),
        dynamic_axes=axes,
        **EXPORT_KW,
    )
    return path
