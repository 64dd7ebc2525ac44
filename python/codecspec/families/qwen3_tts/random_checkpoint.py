"""Random-weight Qwen3-TTS 12 Hz checkpoint folders of the real shapes (never shipped).

The time of a graph call does not depend on the values of its weights, so a folder with the
published layout and shapes and seeded random values measures speed at the real size without
the real weights. `write_random_checkpoint(shape, out)` writes what a download of
Qwen/Qwen3-TTS-12Hz-{0.6B,1.7B}-CustomVoice holds:

  config.json                 Qwen3TTSConfig (talker, code predictor, speakers, languages, RoPE)
  generation_config.json      the published sampling defaults
  model.safetensors           bf16 talker + code predictor (1.7B: two shards + an index)
  vocab.json, merges.txt,     a byte-level BPE text tokenizer with the real vocabulary size
  tokenizer_config.json       (151,643 regular tokens, then Qwen's special tokens)
  speech_tokenizer/           the 12 Hz tokenizer's config (real decoder and encoder configs),
                              preprocessor_config.json, and float32 decoder and encoder
                              weights of the released shapes (the encoder gives in-context
                              cloning its reference codes)

Sources of the values (looked up, not copied): the class defaults and key names of
`qwen_tts/core/models/configuration_qwen3_tts.py` and
`qwen_tts/core/tokenizer_12hz/configuration_qwen3_tts_tokenizer_v2.py` (qwen-tts 0.1.1); the
dimensions, codec ids, speakers and languages of the published config.json as several
independent public ports give them (see docs/qwen3_tts.md);
the decoder config is `families.qwen3_tts.decoder_graph.PUBLISHED_DECODER_CONFIG`.

Not written: a speaker encoder (CustomVoice and VoiceDesign folders have none). The text
tokenizer is trained on generated pseudo-English, so its merges are not Qwen's: text
tokenizes to a similar but not equal number of tokens.

The `tiny` shape keeps every name, the layout and the id relations (codec ids = real id - 2048 +
codebook size; text special ids follow the regular vocabulary) at small sizes, for tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["SHAPES", "CheckpointShape", "write_random_checkpoint", "MODEL_TYPES"]

MODEL_TYPES = ("custom_voice", "voice_design")
_BLOCK_ELEMENTS = 1 << 23  # ~32 MB of float32 per generated block: bounds peak memory

# Published codec ids (talker_config) of the 12 Hz CustomVoice checkpoints, codebook 2048.
_CODEC_IDS = {
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,
    "codec_think_id": 2154,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
}
_LANGUAGES = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
    "beijing_dialect": 2074,
    "sichuan_dialect": 2062,
}
_SPEAKERS = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}
_DIALECT = {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}
_REAL_CODEBOOK = 2048

# Qwen's added tokens after the 151,643 regular ones (Qwen2.5 / Qwen3 tokenizer_config), then
# the TTS text tokens; tts_pad / tts_bos / tts_eos land on the published ids 151671..151673.
# (special, content); the tool tokens are not special in Qwen's own tokenizer_config.
_ADDED_TOKENS = [
    (True, "<|endoftext|>"),
    (True, "<|im_start|>"),
    (True, "<|im_end|>"),
    (True, "<|object_ref_start|>"),
    (True, "<|object_ref_end|>"),
    (True, "<|box_start|>"),
    (True, "<|box_end|>"),
    (True, "<|quad_start|>"),
    (True, "<|quad_end|>"),
    (True, "<|vision_start|>"),
    (True, "<|vision_end|>"),
    (True, "<|vision_pad|>"),
    (True, "<|image_pad|>"),
    (True, "<|video_pad|>"),
    (False, "<tool_call>"),
    (False, "</tool_call>"),
    (False, "<|fim_prefix|>"),
    (False, "<|fim_middle|>"),
    (False, "<|fim_suffix|>"),
    (False, "<|fim_pad|>"),
    (False, "<|repo_name|>"),
    (False, "<|file_sep|>"),
    (False, "<tool_response>"),
    (False, "</tool_response>"),
    (False, "<think>"),
    (False, "</think>"),
    (True, "<|audio_start|>"),
    (True, "<|audio_end|>"),
    (True, "<|tts_pad|>"),
    (True, "<|tts_text_bos|>"),
    (True, "<|tts_text_eod|>"),
]
_ROOT_TEXT_IDS = {  # config.json key -> index into _ADDED_TOKENS
    "im_start_token_id": 1,
    "im_end_token_id": 2,
    "tts_pad_token_id": 28,
    "tts_bos_token_id": 29,
    "tts_eos_token_id": 30,
}

# The released decoder's layout at test sizes (only the sizes differ).
_TINY_DECODER_SIZES = {
    "codebook_size": 64,
    "codebook_dim": 16,
    "hidden_size": 32,
    "head_dim": 8,
    "latent_dim": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "sliding_window": 8,
    "decoder_dim": 64,
}


@dataclasses.dataclass(frozen=True)
class CheckpointShape:
    """Dimensions of one checkpoint size. Code predictor: heads / kv heads / head_dim as the
    talker's unless given."""

    size_tag: str  # config.json tts_model_size
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    mrope_section: tuple
    cp_hidden: int
    cp_layers: int
    cp_heads: int
    cp_kv_heads: int
    cp_head_dim: int
    cp_intermediate: int
    text_hidden: int
    text_regular: int  # regular (BPE) tokens; the added tokens follow
    text_vocab: int  # rows of the text embedding table (padded)
    codebook: int
    decoder: dict
    encoder: dict
    shards: int
    max_positions: int = 32768

    @property
    def codec_vocab(self) -> int:
        return self.codebook + 1024

    def codec_id(self, real_id: int) -> int:
        """The id relations of the real checkpoint moved to this codebook size."""
        return int(real_id) - _REAL_CODEBOOK + self.codebook

    def text_id(self, index: int) -> int:
        return self.text_regular + index


def _mimi_encoder(codebook: int, hidden: int, layers: int, heads: int, filters: int) -> dict:
    """encoder_config of the 12 Hz tokenizer (a Mimi encoder; transformers' MimiConfig keys)."""
    return {
        "_frame_rate": 12.5,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "audio_channels": 1,
        "codebook_dim": 256 if hidden >= 256 else 16,
        "codebook_size": codebook,
        "compress": 2,
        "dilation_growth_rate": 2,
        "head_dim": hidden // heads,
        "hidden_act": "gelu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": 4 * hidden,
        "kernel_size": 7,
        "last_kernel_size": 3,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "model_type": "mimi",
        "norm_eps": 1e-5,
        "num_attention_heads": heads,
        "num_filters": filters,
        "num_hidden_layers": layers,
        "num_key_value_heads": heads,
        "num_quantizers": 16,
        "num_residual_layers": 1,
        "num_semantic_quantizers": 1,
        "pad_mode": "constant",
        "residual_kernel_size": 3,
        "rope_theta": 10000.0,
        "sampling_rate": 24000,
        "sliding_window": 250,
        "trim_right_ratio": 1.0,
        "upsample_groups": hidden,
        "upsampling_ratios": [8, 6, 5, 4],
        "use_cache": False,
        "use_causal_conv": True,
        "use_conv_shortcut": False,
        "use_streaming": False,
        # the codebook width: the RVQ projects into it before the nearest-entry search
        "vector_quantization_hidden_dimension": 256 if hidden >= 256 else 16,
    }


def _real(size_tag: str, hidden: int, intermediate: int, shards: int) -> CheckpointShape:
    from codecspec.families.qwen3_tts.decoder_graph import PUBLISHED_DECODER_CONFIG

    return CheckpointShape(
        size_tag=size_tag,
        hidden=hidden,
        layers=28,
        heads=16,
        kv_heads=8,
        head_dim=128,
        intermediate=intermediate,
        mrope_section=(24, 20, 20),
        cp_hidden=1024,
        cp_layers=5,
        cp_heads=16,
        cp_kv_heads=8,
        cp_head_dim=128,
        cp_intermediate=3072,
        text_hidden=2048,
        text_regular=151643,
        text_vocab=151936,
        codebook=2048,
        decoder=dict(PUBLISHED_DECODER_CONFIG),
        encoder=_mimi_encoder(2048, 512, 8, 8, 64),
        shards=shards,
    )


def _tiny() -> CheckpointShape:
    from codecspec.families.qwen3_tts.decoder_graph import PUBLISHED_DECODER_CONFIG

    return CheckpointShape(
        size_tag="0b6",
        hidden=48,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=16,
        intermediate=96,
        mrope_section=(4, 2, 2),
        cp_hidden=32,  # != talker hidden: the 1.7B layout, small_to_mtp_projection included
        cp_layers=2,
        cp_heads=4,
        cp_kv_heads=2,
        cp_head_dim=8,
        cp_intermediate=64,
        text_hidden=40,
        text_regular=2000,
        text_vocab=2048,
        codebook=64,
        decoder={**PUBLISHED_DECODER_CONFIG, **_TINY_DECODER_SIZES},
        encoder=_mimi_encoder(64, 16, 1, 2, 4),
        shards=2,
        max_positions=4096,
    )


# 0.6B: one model.safetensors (1.8 GB); 1.7B: ~3.8 GB in two shards with an index.
SHAPES = {
    "qwen3-0.6b": lambda: _real("0b6", 1024, 3072, shards=1),
    "qwen3-1.7b": lambda: _real("1b7", 2048, 6144, shards=2),
    "tiny": _tiny,
}


# ---------------------------------------------------------------------- tensors
def _layer_shapes(prefix: str, h: int, heads: int, kv: int, hd: int, inter: int) -> dict:
    return {
        prefix + "self_attn.q_proj.weight": (heads * hd, h),
        prefix + "self_attn.k_proj.weight": (kv * hd, h),
        prefix + "self_attn.v_proj.weight": (kv * hd, h),
        prefix + "self_attn.o_proj.weight": (h, heads * hd),
        prefix + "self_attn.q_norm.weight": (hd,),
        prefix + "self_attn.k_norm.weight": (hd,),
        prefix + "mlp.gate_proj.weight": (inter, h),
        prefix + "mlp.up_proj.weight": (inter, h),
        prefix + "mlp.down_proj.weight": (h, inter),
        prefix + "input_layernorm.weight": (h,),
        prefix + "post_attention_layernorm.weight": (h,),
    }


def model_tensor_shapes(s: CheckpointShape) -> dict[str, tuple]:
    """Every tensor of Qwen3TTSForConditionalGeneration's state dict for a CustomVoice /
    VoiceDesign checkpoint (no speaker encoder), in the official names."""
    H, T = s.hidden, s.text_hidden
    out: dict[str, tuple] = {}
    for i in range(s.layers):
        out.update(
            _layer_shapes(
                f"talker.model.layers.{i}.", H, s.heads, s.kv_heads, s.head_dim, s.intermediate
            )
        )
    out["talker.model.norm.weight"] = (H,)
    out["talker.model.codec_embedding.weight"] = (s.codec_vocab, H)
    out["talker.model.text_embedding.weight"] = (s.text_vocab, T)
    out["talker.text_projection.linear_fc1.weight"] = (T, T)
    out["talker.text_projection.linear_fc1.bias"] = (T,)
    out["talker.text_projection.linear_fc2.weight"] = (H, T)
    out["talker.text_projection.linear_fc2.bias"] = (H,)
    out["talker.codec_head.weight"] = (s.codec_vocab, H)
    cp = "talker.code_predictor."
    for i in range(s.cp_layers):
        out.update(
            _layer_shapes(
                f"{cp}model.layers.{i}.",
                s.cp_hidden,
                s.cp_heads,
                s.cp_kv_heads,
                s.cp_head_dim,
                s.cp_intermediate,
            )
        )
    out[cp + "model.norm.weight"] = (s.cp_hidden,)
    for j in range(15):  # code groups 1..15; the embeddings live in the talker's width
        out[f"{cp}model.codec_embedding.{j}.weight"] = (s.codebook, H)
    for j in range(15):
        out[f"{cp}lm_head.{j}.weight"] = (s.codebook, s.cp_hidden)
    if s.cp_hidden != H:  # Identity (no tensor) when the widths agree
        out[cp + "small_to_mtp_projection.weight"] = (s.cp_hidden, H)
        out[cp + "small_to_mtp_projection.bias"] = (s.cp_hidden,)
    return out


def _tensor_rng(seed: int, name: str) -> np.random.Generator:
    """One generator per tensor: a tensor's values do not depend on which others exist."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def _model_blocks(seed: int):
    """blocks(name, shape) for write_safetensors_stream: norms ~ 1 + 0.1 N, biases 0.02 N,
    embedding rows N(0, 1), weights N(0, 1/fan_in); row blocks of at most ~32 MB."""

    def blocks(name: str, shape: tuple) -> Iterator[np.ndarray]:
        rng = _tensor_rng(seed, name)
        f32 = np.float32
        if len(shape) == 1:
            if name.endswith("norm.weight"):
                yield f32(1.0) + f32(0.1) * rng.standard_normal(shape, dtype=f32)
            else:
                yield f32(0.02) * rng.standard_normal(shape, dtype=f32)
            return
        rows, cols = shape
        scale = f32(1.0 if "embedding" in name else 1.0 / np.sqrt(cols))
        step = max(1, _BLOCK_ELEMENTS // cols)
        for r in range(0, rows, step):
            n = min(step, rows - r)
            yield scale * rng.standard_normal((n, cols), dtype=f32)

    return blocks


def _decoder_blocks(seed: int):
    from codecspec.families.qwen3_tts.decoder_graph import random_decoder_tensor

    def blocks(name: str, shape: tuple) -> Iterator[np.ndarray]:
        yield random_decoder_tensor(name, shape, _tensor_rng(seed, name))

    return blocks


def _tokenizer_blocks(seed: int):
    """The decoder's value ranges suit the encoder's tensors too; the codebooks' `initialized`
    flags are 1, as in a trained checkpoint."""
    decoder = _decoder_blocks(seed)

    def blocks(name: str, shape: tuple) -> Iterator[np.ndarray]:
        if name.endswith(".initialized"):
            yield np.ones(shape, np.float32)
        else:
            yield from decoder(name, shape)

    return blocks


def _encoder_unread_shapes(c) -> dict:
    """Encoder-side tensors the official model has but encoding does not read (the RVQs'
    output projections, the codebooks' `initialized` flags): written so that the official
    loader finds every tensor."""
    q = "encoder.quantizer."
    out = {}
    for part, n in (("semantic", c.num_semantic), ("acoustic", c.num_quantizers - c.num_semantic)):
        prefix = f"{q}{part}_residual_vector_quantizer."
        if c.vq_dim != c.hidden_size:
            out[prefix + "output_proj.weight"] = (c.hidden_size, c.vq_dim, 1)
        for k in range(n):
            out[f"{prefix}layers.{k}.codebook.initialized"] = (1,)
    return out


def _split_shards(shapes: dict, shards: int) -> list[dict]:
    """Consecutive groups of about equal bytes (the published shards split by size)."""
    sizes = {n: int(np.prod(s)) for n, s in shapes.items()}
    total, target = sum(sizes.values()), sum(sizes.values()) / shards
    groups: list[dict] = [{}]
    acc = 0
    for name, shp in shapes.items():
        if acc >= target * len(groups) and len(groups) < shards:
            groups.append({})
        groups[-1][name] = shp
        acc += sizes[name]
    assert acc == total
    return groups


def _write_weights(s: CheckpointShape, out: Path, seed: int, bar) -> int:
    from codecspec.graphs.safetensors_io import write_safetensors_stream

    shapes = model_tensor_shapes(s)
    meta = {"format": "pt"}
    blocks = _model_blocks(seed)
    if s.shards == 1:
        return write_safetensors_stream(
            out / "model.safetensors", shapes, blocks, "bf16", meta, bar("model.safetensors")
        )
    groups = _split_shards(shapes, s.shards)
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        total += write_safetensors_stream(out / fname, group, blocks, "bf16", meta, bar(fname))
        weight_map.update({n: fname for n in group})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return total


# ---------------------------------------------------------------------- configs
def _code_predictor_config(s: CheckpointShape) -> dict:
    return {
        "attention_bias": False,
        "attention_dropout": 0,
        "head_dim": s.cp_head_dim,
        "hidden_act": "silu",
        "hidden_size": s.cp_hidden,
        "initializer_range": 0.02,
        "intermediate_size": s.cp_intermediate,
        "layer_types": ["full_attention"] * s.cp_layers,
        "max_position_embeddings": 65536,
        "max_window_layers": 28,
        "model_type": "qwen3_tts_talker_code_predictor",
        "num_attention_heads": s.cp_heads,
        "num_code_groups": 16,
        "num_hidden_layers": s.cp_layers,
        "num_key_value_heads": s.cp_kv_heads,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": s.codebook,
    }


def _talker_config(s: CheckpointShape, model_type: str) -> dict:
    t = {
        "attention_bias": False,
        "attention_dropout": 0,
        "code_predictor_config": _code_predictor_config(s),
        **{k: s.codec_id(v) for k, v in _CODEC_IDS.items()},
        "codec_language_id": {k: s.codec_id(v) for k, v in _LANGUAGES.items()},
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "hidden_size": s.hidden,
        "initializer_range": 0.02,
        "intermediate_size": s.intermediate,
        "max_position_embeddings": s.max_positions,
        "model_type": "qwen3_tts_talker",
        "num_attention_heads": s.heads,
        "num_code_groups": 16,
        "num_hidden_layers": s.layers,
        "num_key_value_heads": s.kv_heads,
        "position_id_per_seconds": 13,
        "rms_norm_eps": 1e-6,
        "rope_scaling": {
            "interleaved": True,
            "mrope_section": list(s.mrope_section),
            "rope_type": "default",
        },
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "spk_id": {},
        "spk_is_dialect": {},
        "text_hidden_size": s.text_hidden,
        "text_vocab_size": s.text_vocab,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": s.codec_vocab,
    }
    if model_type == "custom_voice":
        t["spk_id"] = {k: s.codec_id(v) for k, v in _SPEAKERS.items()}
        t["spk_is_dialect"] = {k: _DIALECT.get(k, False) for k in _SPEAKERS}
    return t


def _root_config(s: CheckpointShape, model_type: str, assistant_id: Optional[int]) -> dict:
    root = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        **({"assistant_token_id": assistant_id} if assistant_id is not None else {}),
        **{k: s.text_id(i) for k, i in _ROOT_TEXT_IDS.items()},
        "model_type": "qwen3_tts",
        "speaker_encoder_config": {  # class defaults; x-vector width = talker width
            "enc_dim": s.hidden,
            "mel_dim": 128,
            "sample_rate": 24000,
        },
        "talker_config": _talker_config(s, model_type),
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.3",
        "tts_model_size": s.size_tag,
        "tts_model_type": model_type,
    }
    return dict(sorted(root.items()))


# The published generation_config.json (Qwen3TTSModel reads it as its generate defaults).
GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}


def _write_speech_tokenizer(s: CheckpointShape, out: Path, seed: int, bar) -> int:
    from codecspec.families.qwen3_tts.decoder_graph import (
        MODEL_TYPE,
        decoder_tensor_shapes,
        speech_decoder_config,
    )
    from codecspec.families.qwen3_tts.encoder_graph import (
        encoder_tensor_shapes,
        speech_encoder_config,
    )
    from codecspec.graphs.safetensors_io import write_safetensors_stream

    folder = out / "speech_tokenizer"
    folder.mkdir()
    root = {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "decode_upsample_rate": 1920,
        "decoder_config": dict(s.decoder),
        "encode_downsample_rate": 1920,
        "encoder_config": dict(s.encoder),
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "model_type": MODEL_TYPE,
        "output_sample_rate": 24000,
        "transformers_version": "4.57.3",
    }
    encoder = speech_encoder_config(root)
    shapes = {
        **decoder_tensor_shapes(speech_decoder_config(root)),
        **encoder_tensor_shapes(encoder),
        **_encoder_unread_shapes(encoder),
    }
    (folder / "config.json").write_text(json.dumps(root, indent=2) + "\n")
    feature = {  # transformers' EncodecFeatureExtractor, as the Mimi encoder takes audio
        "chunk_length_s": None,
        "feature_extractor_type": "EncodecFeatureExtractor",
        "feature_size": 1,
        "overlap": None,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "sampling_rate": 24000,
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(feature, indent=2) + "\n")
    return write_safetensors_stream(
        folder / "model.safetensors",
        shapes,
        _tokenizer_blocks(seed),
        "f32",  # the published speech tokenizer is float32
        {"format": "pt"},
        bar("speech_tokenizer/model.safetensors"),
    )


# ---------------------------------------------------------------------- entry point
def _check_out(out, force: bool) -> tuple[Path, bool]:
    """(folder, whether an earlier Qwen3-TTS folder there is to be replaced)."""
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise ValueError(f"out: expected a folder path, got {out!r}")
    d = Path(out).expanduser()
    if d.exists() and not d.is_dir():
        raise ValueError(f"out: {d} exists and is not a folder")
    if d.is_dir() and any(d.iterdir()):
        if not force:
            raise ValueError(f"out: {d} exists and is not empty (pass --force to overwrite)")
        from .checkpoint import is_qwen3_folder

        if not is_qwen3_folder(str(d)):  # --force must not wipe an unrelated folder
            raise ValueError(
                f"out: {d} is not empty and not a Qwen3-TTS folder; --force only replaces one"
            )
        return d, True
    return d, False


def _staging_folder(d: Path) -> Path:
    """A fresh sibling of `d` to write into, renamed to `d` once complete: a failed or
    interrupted write leaves no half folder (and a replaced folder stays until then)."""
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.partial-", dir=d.parent))
    except OSError as e:
        raise ValueError(f"out: cannot write in {d.parent} ({e.strerror})") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 is not what a plain mkdir gives
    return tmp


def write_random_checkpoint(
    shape: str,
    out,
    *,
    seed: int = 0,
    model_type: str = "custom_voice",
    force: bool = False,
    progress: bool = False,
) -> dict:
    """Write a random-weight Qwen3-TTS folder of `shape` ('qwen3-0.6b' | 'qwen3-1.7b' |
    'tiny') to `out`; returns a summary (files, bytes, parameters). ValueError names the
    argument for an unknown shape or model type, or a non-empty `out` without force."""
    from .random_text_tokenizer import write_text_tokenizer

    if shape not in SHAPES:
        raise ValueError(f"shape: {shape!r} is not one of {sorted(SHAPES)}")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"model_type: {model_type!r} is not one of {MODEL_TYPES} (a Base folder needs "
            "speaker-encoder weights, which this command does not write)"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    s = SHAPES[shape]()
    d, replace = _check_out(out, force)

    def bar(desc):
        if not progress:
            return None
        from codecspec.progress import bar as pbar

        return lambda names: pbar(names, desc=f"writing {desc}", total=len(names))

    tmp = _staging_folder(d)
    try:
        assistant_id = write_text_tokenizer(tmp, s.text_regular, _ADDED_TOKENS, seed)
        root = _root_config(s, model_type, assistant_id)
        (tmp / "config.json").write_text(json.dumps(root, indent=2) + "\n")
        gen = json.dumps(GENERATION_CONFIG, indent=2) + "\n"
        (tmp / "generation_config.json").write_text(gen)
        model_bytes = _write_weights(s, tmp, seed, bar)
        tokenizer_bytes = _write_speech_tokenizer(s, tmp, seed, bar)
        if replace:
            shutil.rmtree(d)
        elif d.exists():
            d.rmdir()  # empty, checked above
        os.rename(tmp, d)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    params = sum(int(np.prod(v)) for v in model_tensor_shapes(s).values())
    return {
        "out": str(d),
        "shape": shape,
        "model_type": model_type,
        "seed": int(seed),
        "parameters": params,
        "model_bytes": model_bytes,
        "speech_tokenizer_bytes": tokenizer_bytes,
        "files": sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()),
    }
