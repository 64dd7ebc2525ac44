"""Import the code predictor (depth decoder) of a Qwen3-TTS 12 Hz checkpoint, without torch.

Names and config keys follow the official implementation (QwenLM/Qwen3-TTS):
- qwen_tts/core/models/modeling_qwen3_tts.py
    Qwen3TTSForConditionalGeneration.talker          -> prefix "talker."
    Qwen3TTSTalkerForConditionalGeneration.model     -> "talker.model." (c0: codec_embedding)
    Qwen3TTSTalkerForConditionalGeneration.code_predictor -> "talker.code_predictor."
    Qwen3TTSTalkerCodePredictorModelForConditionalGeneration:
        .model (layers, norm, codec_embedding[G-1]), .lm_head[G-1],
        .small_to_mtp_projection (Linear(talker hidden -> predictor hidden, bias) when the
        hidden sizes differ, otherwise Identity and absent from the checkpoint)
    Qwen3TTSDecoderLayer: input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
        post_attention_layernorm, mlp.{gate,up,down}_proj
  The predictor's first input is the talker's final-norm hidden state of the previous position
  (`past_hidden`), the second the talker's codec embedding of c0; every input embedding goes
  through small_to_mtp_projection.
- qwen_tts/core/models/configuration_qwen3_tts.py
    config.json -> "talker_config" (Qwen3TTSTalkerConfig) -> "code_predictor_config"
    (Qwen3TTSTalkerCodePredictorConfig); class defaults are used for absent keys.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Optional, Union

import numpy as np

from codecspec.graphs.config import DepthDecoderConfig
from codecspec.graphs.safetensors_io import SafetensorsFile, bf16_round, write_safetensors
from codecspec.graphs.weights import DepthDecoderWeights, expected_shapes

__all__ = [
    "load_qwen3_tts_checkpoint",
    "config_from_qwen3_tts",
    "write_synthetic_qwen3_checkpoint",
    "qwen3_tensor_names",
    "ShardedCheckpoint",
]

_CP = "talker.code_predictor."
_C0 = "talker.model.codec_embedding.weight"

# Defaults of Qwen3TTSTalkerCodePredictorConfig / Qwen3TTSTalkerConfig for keys a config.json
# may omit (configuration_qwen3_tts.py).
_CP_DEFAULTS = {
    "vocab_size": 2048,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 5,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "num_code_groups": 32,
}
_TALKER_DEFAULTS = {"vocab_size": 3072, "hidden_size": 1024}

LAYER_MAP = {  # codecspec weight name -> a Qwen3 decoder layer's checkpoint tensor
    "input_norm": "input_layernorm.weight",
    "q_proj": "self_attn.q_proj.weight",
    "k_proj": "self_attn.k_proj.weight",
    "v_proj": "self_attn.v_proj.weight",
    "o_proj": "self_attn.o_proj.weight",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "post_norm": "post_attention_layernorm.weight",
    "gate_proj": "mlp.gate_proj.weight",
    "up_proj": "mlp.up_proj.weight",
    "down_proj": "mlp.down_proj.weight",
}


def qwen3_tensor_names(config: DepthDecoderConfig) -> dict[str, str]:
    """Checkpoint tensor name for every depth-decoder tensor except the per-table stacks.

    Stacked tensors (code_embeddings, heads) map to a "{j}" pattern.
    """
    names = {
        "c0_embedding": _C0,
        "code_embeddings": _CP + "model.codec_embedding.{j}.weight",
        "final_norm": _CP + "model.norm.weight",
        "heads": _CP + "lm_head.{j}.weight",
    }
    if config.has_input_proj:
        names["input_proj.weight"] = _CP + "small_to_mtp_projection.weight"
        names["input_proj.bias"] = _CP + "small_to_mtp_projection.bias"
    for i in range(config.num_layers):
        for ours, theirs in LAYER_MAP.items():
            names[f"layers.{i}.{ours}"] = f"{_CP}model.layers.{i}.{theirs}"
    return names


# ---------------------------------------------------------------------- config
def config_from_qwen3_tts(
    root: dict, *, num_draft_offsets: int = 3, max_positions: int = 32
) -> DepthDecoderConfig:
    """DepthDecoderConfig from the parsed config.json of a Qwen3-TTS checkpoint."""
    if not isinstance(root, dict) or "talker_config" not in root:
        raise ValueError("config.json: missing 'talker_config' (not a Qwen3-TTS checkpoint?)")
    talker = root["talker_config"] or {}
    cp = talker.get("code_predictor_config")
    if not isinstance(cp, dict):
        raise ValueError("config.json: missing 'talker_config.code_predictor_config'")

    def get(d: dict, defaults: dict, key: str):
        v = d.get(key)
        return defaults[key] if v is None else v

    if cp.get("hidden_act", "silu") not in ("silu", "swish"):
        raise ValueError(
            f"code_predictor_config.hidden_act={cp['hidden_act']!r} is not supported (silu only)"
        )
    if cp.get("attention_bias"):
        raise ValueError("code_predictor_config.attention_bias=true is not supported")
    if cp.get("use_sliding_window"):
        raise ValueError("code_predictor_config.use_sliding_window=true is not supported")
    for layer_type in cp.get("layer_types") or ():
        if layer_type != "full_attention":
            raise ValueError(f"code_predictor_config.layer_types: {layer_type!r} not supported")
    n_types, n_layers = len(cp.get("layer_types") or ()), cp.get("num_hidden_layers")
    if n_types and n_layers is not None and n_types != n_layers:
        raise ValueError(
            f"code_predictor_config.layer_types: {n_types} entries for {n_layers} layers"
        )
    rope = cp.get("rope_scaling") or cp.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in (None, "default"):
        raise ValueError(f"code_predictor_config rope type {rope_type!r} is not supported")
    theta = cp.get("rope_theta")
    if theta is None:
        theta = rope.get("rope_theta", _CP_DEFAULTS["rope_theta"])

    hidden = int(get(cp, _CP_DEFAULTS, "hidden_size"))
    heads = int(get(cp, _CP_DEFAULTS, "num_attention_heads"))
    # Absent keys take Qwen3TTSTalkerCodePredictorConfig's defaults (head_dim 128, 8 KV
    # heads), not values derived from the other sizes.
    head_dim = int(get(cp, _CP_DEFAULTS, "head_dim"))
    kv = cp.get("num_key_value_heads", _CP_DEFAULTS["num_key_value_heads"])
    kv = heads if kv is None else int(kv)  # an explicit null means MHA there
    groups = cp.get("num_code_groups", talker.get("num_code_groups"))
    groups = _CP_DEFAULTS["num_code_groups"] if groups is None else int(groups)
    talker_hidden = int(get(talker, _TALKER_DEFAULTS, "hidden_size"))
    return DepthDecoderConfig(
        num_layers=int(get(cp, _CP_DEFAULTS, "num_hidden_layers")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=int(get(cp, _CP_DEFAULTS, "intermediate_size")),
        rms_norm_eps=float(get(cp, _CP_DEFAULTS, "rms_norm_eps")),
        rope_theta=float(theta),
        num_codebooks=groups,
        codebook_size=int(get(cp, _CP_DEFAULTS, "vocab_size")),
        c0_vocab_size=int(get(talker, _TALKER_DEFAULTS, "vocab_size")),
        input_hidden_size=None if talker_hidden == hidden else talker_hidden,
        num_draft_offsets=num_draft_offsets,
        max_positions=max_positions,
    )


# ---------------------------------------------------------------------- tensors
class ShardedCheckpoint:
    """name -> file lookup over one or many safetensors shards (a checkpoint folder's
    model.safetensors or its index.json's shards); public: the Qwen3-TTS family reads its
    tensors through it."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._files: dict[str, SafetensorsFile] = {}
        self._where: dict[str, str] = {}
        index = os.path.join(directory, "model.safetensors.index.json")
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as f:
                    weight_map = json.load(f)["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{index}: malformed index ({e})") from None
            for name, fname in weight_map.items():
                self._where[name] = os.path.join(directory, fname)
        else:
            paths = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
            if not paths:
                raise FileNotFoundError(f"no *.safetensors file in {directory!r}")
            for p in paths:
                for name in self._open(p).keys():
                    self._where.setdefault(name, p)

    def _open(self, path: str) -> SafetensorsFile:
        if path not in self._files:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"checkpoint shard not found: {path!r}")
            self._files[path] = SafetensorsFile(path)
        return self._files[path]

    def get(self, name: str, shape: Optional[tuple] = None) -> np.ndarray:
        if name not in self._where:
            raise ValueError(f"checkpoint {self.directory!r} has no tensor {name!r}")
        f = self._open(self._where[name])
        if name not in f:
            raise ValueError(f"{f.path}: index lists tensor {name!r} but the file lacks it")
        if shape is not None and f.shape(name) != tuple(shape):
            raise ValueError(
                f"checkpoint tensor {name!r} has shape {list(f.shape(name))}, "
                f"config implies {list(shape)}"
            )
        return f.get(name)

    def close(self) -> None:
        for f in self._files.values():
            f.close()


def load_qwen3_tts_checkpoint(
    directory: Union[str, os.PathLike],
    *,
    num_draft_offsets: int = 3,
    max_positions: int = 32,
    draft_offsets: Optional[np.ndarray] = None,
) -> tuple[DepthDecoderConfig, DepthDecoderWeights]:
    """(config, float32 weights) of the code predictor in a Qwen3-TTS 12 Hz checkpoint dir.

    Reads config.json and model.safetensors (or the shards listed in
    model.safetensors.index.json). Draft offsets are not part of the checkpoint: zeros (plain
    head reuse) unless `draft_offsets` [K, H] is given.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"checkpoint directory not found: {directory!r}")
    cfg_path = os.path.join(directory, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"config.json not found in {directory!r}")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            root = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{cfg_path}: invalid JSON ({e})") from None
    config = config_from_qwen3_tts(
        root, num_draft_offsets=num_draft_offsets, max_positions=max_positions
    )
    c = config
    ck = ShardedCheckpoint(directory)
    try:
        w = DepthDecoderWeights()
        names = qwen3_tensor_names(c)
        shapes = expected_shapes(c)
        for ours, theirs in names.items():
            if "{j}" in theirs:
                per = shapes[ours][1:]
                w[ours] = np.stack([ck.get(theirs.format(j=j), per) for j in range(c.num_lm_heads)])
            else:
                w[ours] = ck.get(theirs, shapes[ours])
    finally:
        ck.close()
    if draft_offsets is None:
        w["draft_offsets"] = np.zeros((c.num_draft_offsets, c.hidden_size), np.float32)
    else:
        w["draft_offsets"] = draft_offsets
    w.validate(c)
    return c, w


# ---------------------------------------------------------------------- synthetic checkpoints
def _qwen3_config_json(c: DepthDecoderConfig) -> dict:
    talker_hidden = c.input_width
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": "synthetic",
        "tts_model_type": "custom_voice",
        "im_start_token_id": 151644,
        "im_end_token_id": 151645,
        "tts_pad_token_id": 151671,
        "tts_bos_token_id": 151672,
        "tts_eos_token_id": 151673,
        "talker_config": {
            "hidden_size": talker_hidden,
            "intermediate_size": 2 * talker_hidden,
            "num_hidden_layers": 1,
            "num_attention_heads": c.num_heads,
            "num_key_value_heads": c.num_kv_heads,
            "head_dim": c.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta,
            "rope_scaling": {
                "interleaved": True,
                "mrope_section": [c.head_dim // 2 - 2 * (c.head_dim // 6)] + [c.head_dim // 6] * 2,
                "rope_type": "default",
            },
            "vocab_size": c.c0_vocab_size,
            "text_vocab_size": 32,
            "text_hidden_size": talker_hidden,
            "num_code_groups": c.num_codebooks,
            "attention_bias": False,
            "code_predictor_config": {
                "hidden_size": c.hidden_size,
                "intermediate_size": c.intermediate_size,
                "num_hidden_layers": c.num_layers,
                "num_attention_heads": c.num_heads,
                "num_key_value_heads": c.num_kv_heads,
                "head_dim": c.head_dim,
                "hidden_act": "silu",
                "max_position_embeddings": 65536,
                "rms_norm_eps": c.rms_norm_eps,
                "rope_theta": c.rope_theta,
                "rope_scaling": None,
                "attention_bias": False,
                "use_sliding_window": False,
                "vocab_size": c.codebook_size,
                "num_code_groups": c.num_codebooks,
            },
        },
        "speaker_encoder_config": {"enc_dim": talker_hidden, "sample_rate": 24000},
    }


def write_synthetic_qwen3_checkpoint(
    directory: Union[str, os.PathLike],
    config: DepthDecoderConfig,
    seed: int = 0,
    dtype: str = "bf16",
    *,
    shards: int = 1,
) -> DepthDecoderWeights:
    """Write a small checkpoint with the official Qwen3-TTS names and config.json layout.

    Depth-decoder tensors come from DepthDecoderWeights.random(config, seed); a few talker
    tensors (one layer, norms, codec head, text path) are added so the file looks like a real
    checkpoint to the loader. Returns the depth-decoder weights as stored (after rounding to
    `dtype`, draft offsets zero), i.e. what load_qwen3_tts_checkpoint should give back.
    """
    if dtype not in ("bf16", "f16", "f32"):
        raise ValueError(f"dtype must be 'bf16', 'f16' or 'f32', got {dtype!r}")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive int, got {shards!r}")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    c = config
    w = DepthDecoderWeights.random(c, seed)
    rng = np.random.default_rng(seed + 1)
    tensors: dict[str, np.ndarray] = {}
    for ours, theirs in qwen3_tensor_names(c).items():
        if "{j}" in theirs:
            for j in range(c.num_lm_heads):
                tensors[theirs.format(j=j)] = w[ours][j]
        else:
            tensors[theirs] = w[ours]
    th = c.input_width
    small = {
        "talker.model.norm.weight": np.ones(th),
        "talker.codec_head.weight": rng.standard_normal((c.c0_vocab_size, th)) * 0.05,
        "talker.model.text_embedding.weight": rng.standard_normal((32, th)),
        "talker.text_projection.linear_fc1.weight": rng.standard_normal((th, th)) * 0.05,
        "talker.text_projection.linear_fc1.bias": np.zeros(th),
        "talker.text_projection.linear_fc2.weight": rng.standard_normal((th, th)) * 0.05,
        "talker.text_projection.linear_fc2.bias": np.zeros(th),
        "talker.model.layers.0.input_layernorm.weight": np.ones(th),
        "talker.model.layers.0.post_attention_layernorm.weight": np.ones(th),
        "talker.model.layers.0.self_attn.q_proj.weight": rng.standard_normal(
            (c.num_heads * c.head_dim, th)
        )
        * 0.05,
        "talker.model.layers.0.self_attn.q_norm.weight": np.ones(c.head_dim),
    }
    tensors.update({k: np.asarray(v, np.float32) for k, v in small.items()})

    names = sorted(tensors)
    if shards == 1:
        write_safetensors(
            os.path.join(directory, "model.safetensors"), tensors, dtype, {"format": "pt"}
        )
    else:
        weight_map = {}
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[s::shards]}
            write_safetensors(os.path.join(directory, fname), part, dtype, {"format": "pt"})
            weight_map.update({n: fname for n in part})
        total = sum(int(np.asarray(t).size) for t in tensors.values())
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(_qwen3_config_json(c), f, indent=2)

    # What a reader gets back: values rounded through the stored dtype.
    stored = DepthDecoderWeights()
    for name, arr in w.items():
        if dtype == "bf16":
            stored[name] = (bf16_round(arr).astype(np.uint32) << 16).view(np.float32)
        elif dtype == "f16":
            stored[name] = arr.astype(np.float16).astype(np.float32)
        else:
            stored[name] = arr
    stored["draft_offsets"] = np.zeros_like(w["draft_offsets"])
    return stored
