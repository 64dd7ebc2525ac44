"""ONNX graph of the Qwen3-TTS 12 Hz speech tokenizer's decoder (codes -> 24 kHz audio), built
from its safetensors with numpy and the onnx helper, without torch.

What the official decoder computes (qwen_tts 0.1.1,
core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py, `Qwen3TTSTokenizerV2Decoder`):

1. split RVQ dequantisation: codebook k is `embedding_sum / clamp(cluster_usage, 1e-5)`;
   quantizer 0 goes through `rvq_first.output_proj`, the sum of quantizers 1.. through
   `rvq_rest.output_proj` (both 1x1 convs without bias, codebook_dim/2 -> codebook_dim);
2. `pre_conv`: causal conv, kernel 3, codebook_dim -> latent_dim;
3. `pre_transformer`: input_proj, layers of RMSNorm + sliding-window causal attention with
   RoPE (rotate-half) + layer scale, RMSNorm + SwiGLU + layer scale, final norm, output_proj;
4. `upsample`: per ratio a transposed conv (kernel = stride = ratio) and a ConvNeXt block
   (causal depthwise conv 7, LayerNorm 1e-6, Linear 4x, erf GELU, Linear, gamma, residual);
5. `decoder`: causal conv 7 -> decoder_dim, per rate a block [SnakeBeta, transposed conv
   (kernel 2r, stride r, last r samples trimmed), residual units with dilation 1, 3, 9], then
   SnakeBeta, causal conv 7 -> 1 channel and a clamp to [-1, 1].

Every stage is causal: the convolutions pad on the left only, the transposed convolutions trim
on the right, attention sees the current frame and the `sliding_window - 1` before it. So the
graph here is *stateful*: one call decodes n >= 1 new frames given the previous call's state
(the last inputs of every causal conv, the last `sliding_window - 1` keys and values of every
layer, and the frame position for RoPE), and a zero state with position 0 is exactly the zero
padding a whole forward starts with. Splitting a segment into calls changes only the
floating-point summation order, never what is summed.

Graph I/O (batch 1):
    codes      int64   [n, Q]     n >= 1 frames, each code in [0, codebook_size)
    position   int64   [1]        frames this segment has decoded before this call
    <state>    float32 fixed      one input per state tensor, zeros at a segment start
    audio      float32 [n * samples_per_frame]
    <state>_out                   the state after this call, same shapes
The state names and shapes are in the graph's inputs (`state_io_names`).
The batched twin (`batched=True`, for decoder_batch.py) leads every one of these with a
batch axis of one row per stream (codes [B, n, Q], position [B], states [B, ...], audio
[B, n * samples_per_frame]): each row at its own position over its own state.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from codecspec.graphs.builder import GraphBuilder

__all__ = [
    "DECODER_GRAPH_VERSION",
    "SpeechDecoderConfig",
    "speech_decoder_config",
    "decoder_tensor_shapes",
    "build_speech_decoder_graph",
    "state_io_names",
    "random_decoder_tensors",
    "random_decoder_tensor",
    "write_random_speech_tokenizer",
    "PUBLISHED_DECODER_CONFIG",
]

DECODER_GRAPH_VERSION = "1"
MODEL_TYPE = "qwen3_tts_tokenizer_12hz"
_P = "decoder."
_META = "codecspec.qwen3_speech_decoder"
_INT64_MAX = np.iinfo(np.int64).max
_DILATIONS = (1, 3, 9)
_CONVNEXT_KERNEL = 7

# Defaults of Qwen3TTSTokenizerV2DecoderConfig for keys a config.json may omit.
_DEFAULTS = {
    "codebook_size": 2048,
    "hidden_size": 1024,
    "latent_dim": 1024,
    "rope_theta": 10000.0,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "attention_bias": False,
    "sliding_window": 72,
    "intermediate_size": 3072,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "num_hidden_layers": 8,
    "num_quantizers": 16,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 1536,
}


# decoder_config of the released Qwen3-TTS-Tokenizer-12Hz, as several public copies of its
# config.json give it (the file itself could not be read here).
PUBLISHED_DECODER_CONFIG = {
    "codebook_size": 2048,
    "codebook_dim": 512,
    "hidden_size": 512,
    "head_dim": 64,
    "latent_dim": 1024,
    "intermediate_size": 1024,
    "num_quantizers": 16,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "sliding_window": 72,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000,
    "hidden_act": "silu",
    "attention_bias": False,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 1536,
}


@dataclass(frozen=True)
class SpeechDecoderConfig:
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    latent_dim: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    sliding_window: int
    rms_norm_eps: float
    rope_theta: float
    attention_bias: bool
    upsampling_ratios: tuple
    upsample_rates: tuple
    decoder_dim: int
    sample_rate: int

    @property
    def samples_per_frame(self) -> int:
        return int(np.prod(self.upsampling_ratios + self.upsample_rates))

    def block_dims(self, i: int) -> tuple[int, int]:
        """(in, out) channels of decoder block i."""
        return self.decoder_dim // 2**i, self.decoder_dim // 2 ** (i + 1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SpeechDecoderConfig:
        d = json.loads(text)
        d["upsampling_ratios"] = tuple(d["upsampling_ratios"])
        d["upsample_rates"] = tuple(d["upsample_rates"])
        return cls(**d)


def _positive_int(d: dict, key: str) -> int:
    v = d.get(key)
    if v is None:
        v = _DEFAULTS[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"decoder_config.{key} must be a positive int, got {v!r}")
    return v


def _int_list(d: dict, key: str) -> tuple:
    v = d.get(key)
    if v is None:
        v = _DEFAULTS[key]
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"decoder_config.{key} must be a non-empty list of ints, got {v!r}")
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
        raise ValueError(f"decoder_config.{key} must hold positive ints, got {v!r}")
    return tuple(v)


def speech_decoder_config(root: dict) -> SpeechDecoderConfig:
    """SpeechDecoderConfig from a parsed speech_tokenizer/config.json (ValueError otherwise)."""
    if not isinstance(root, dict):
        raise ValueError("config.json is not a JSON object")
    mt = root.get("model_type")
    if mt != MODEL_TYPE:
        what = "a 25 Hz tokenizer" if mt == "qwen3_tts_tokenizer_25hz" else "not a 12 Hz tokenizer"
        raise ValueError(
            f"config.json has model_type {mt!r}: {what}; only {MODEL_TYPE!r} "
            "(Qwen3-TTS-Tokenizer-12Hz) is supported"
        )
    d = root.get("decoder_config")
    if not isinstance(d, dict):
        raise ValueError("config.json: missing 'decoder_config'")
    if d.get("hidden_act", "silu") not in ("silu", "swish"):
        raise ValueError(f"decoder_config.hidden_act={d['hidden_act']!r} is not supported")
    rs = d.get("rope_scaling")
    if isinstance(rs, dict) and rs.get("rope_type", rs.get("type", "default")) != "default":
        raise ValueError(f"decoder_config.rope_scaling={rs!r} is not supported (default only)")
    if "codebook_dim" not in d:
        raise ValueError("decoder_config: missing 'codebook_dim' (the official decoder needs it)")
    heads = _positive_int(d, "num_attention_heads")
    hidden = _positive_int(d, "hidden_size")
    head_dim = d.get("head_dim") or hidden // heads
    kv = _positive_int(d, "num_key_value_heads")
    c = SpeechDecoderConfig(
        codebook_size=_positive_int(d, "codebook_size"),
        codebook_dim=_positive_int(d, "codebook_dim"),
        num_quantizers=_positive_int(d, "num_quantizers"),
        latent_dim=_positive_int(d, "latent_dim"),
        hidden_size=hidden,
        num_layers=_positive_int(d, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=int(head_dim),
        intermediate_size=_positive_int(d, "intermediate_size"),
        sliding_window=_positive_int(d, "sliding_window"),
        rms_norm_eps=float(d.get("rms_norm_eps", _DEFAULTS["rms_norm_eps"])),
        rope_theta=float(d.get("rope_theta", _DEFAULTS["rope_theta"])),
        attention_bias=bool(d.get("attention_bias", False)),
        upsampling_ratios=_int_list(d, "upsampling_ratios"),
        upsample_rates=_int_list(d, "upsample_rates"),
        decoder_dim=_positive_int(d, "decoder_dim"),
        sample_rate=int(root.get("output_sample_rate", 24000)),
    )
    _check_consistent(c, root)
    return c


def _check_consistent(c: SpeechDecoderConfig, root: dict) -> None:
    if c.num_quantizers < 2:
        raise ValueError("decoder_config.num_quantizers must be >= 2 (1 semantic + acoustic)")
    if c.codebook_dim % 2:
        raise ValueError(f"decoder_config.codebook_dim must be even, got {c.codebook_dim}")
    if c.num_heads % c.num_kv_heads or c.head_dim % 2:
        raise ValueError(
            "decoder_config: num_attention_heads must be a multiple of num_key_value_heads "
            "and head_dim even"
        )
    if c.decoder_dim % 2 ** len(c.upsample_rates):
        raise ValueError("decoder_config.decoder_dim must be divisible by 2**len(upsample_rates)")
    rate = root.get("decode_upsample_rate")
    if rate is not None and rate != c.samples_per_frame:
        raise ValueError(
            f"config.json: decode_upsample_rate {rate} != product of upsampling_ratios and "
            f"upsample_rates ({c.samples_per_frame})"
        )
    if c.sample_rate < 1:
        raise ValueError(f"config.json: output_sample_rate must be positive, got {c.sample_rate}")


# ---------------------------------------------------------------------- checkpoint tensors
def decoder_tensor_shapes(c: SpeechDecoderConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> shape of every tensor the decoder graph reads."""
    half = c.codebook_dim // 2
    s: dict[str, tuple[int, ...]] = {}
    q = _P + "quantizer."
    for part, n in (("rvq_first", 1), ("rvq_rest", c.num_quantizers - 1)):
        s[f"{q}{part}.output_proj.weight"] = (c.codebook_dim, half, 1)
        for k in range(n):
            cb = f"{q}{part}.vq.layers.{k}._codebook."
            s[cb + "cluster_usage"] = (c.codebook_size,)
            s[cb + "embedding_sum"] = (c.codebook_size, half)
    s[_P + "pre_conv.conv.weight"] = (c.latent_dim, c.codebook_dim, 3)
    s[_P + "pre_conv.conv.bias"] = (c.latent_dim,)
    t = _P + "pre_transformer."
    H = c.hidden_size
    s[t + "input_proj.weight"] = (H, c.latent_dim)
    s[t + "input_proj.bias"] = (H,)
    s[t + "output_proj.weight"] = (c.latent_dim, H)
    s[t + "output_proj.bias"] = (c.latent_dim,)
    s[t + "norm.weight"] = (H,)
    for i in range(c.num_layers):
        lp = f"{t}layers.{i}."
        s.update(attention_shapes(lp, c))
        s[lp + "mlp.gate_proj.weight"] = (c.intermediate_size, H)
        s[lp + "mlp.up_proj.weight"] = (c.intermediate_size, H)
        s[lp + "mlp.down_proj.weight"] = (H, c.intermediate_size)
        for name in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            s[lp + name] = (H,)
        s[lp + "self_attn_layer_scale.scale"] = (H,)
        s[lp + "mlp_layer_scale.scale"] = (H,)
    L = c.latent_dim
    for j, f in enumerate(c.upsampling_ratios):
        u = f"{_P}upsample.{j}."
        s[u + "0.conv.weight"] = (L, L, f)
        s[u + "0.conv.bias"] = (L,)
        s[u + "1.dwconv.conv.weight"] = (L, 1, _CONVNEXT_KERNEL)
        s[u + "1.dwconv.conv.bias"] = (L,)
        s[u + "1.norm.weight"] = (L,)
        s[u + "1.norm.bias"] = (L,)
        s[u + "1.pwconv1.weight"] = (4 * L, L)
        s[u + "1.pwconv1.bias"] = (4 * L,)
        s[u + "1.pwconv2.weight"] = (L, 4 * L)
        s[u + "1.pwconv2.bias"] = (L,)
        s[u + "1.gamma"] = (L,)
    d = _P + "decoder."
    s[d + "0.conv.weight"] = (c.decoder_dim, L, 7)
    s[d + "0.conv.bias"] = (c.decoder_dim,)
    for i, r in enumerate(c.upsample_rates):
        cin, cout = c.block_dims(i)
        b = f"{d}{i + 1}.block."
        s[b + "0.alpha"] = s[b + "0.beta"] = (cin,)
        s[b + "1.conv.weight"] = (cin, cout, 2 * r)
        s[b + "1.conv.bias"] = (cout,)
        for u in range(len(_DILATIONS)):
            ru = f"{b}{u + 2}."
            for a in ("act1", "act2"):
                s[f"{ru}{a}.alpha"] = s[f"{ru}{a}.beta"] = (cout,)
            s[ru + "conv1.conv.weight"] = (cout, cout, 7)
            s[ru + "conv1.conv.bias"] = (cout,)
            s[ru + "conv2.conv.weight"] = (cout, cout, 1)
            s[ru + "conv2.conv.bias"] = (cout,)
    n = len(c.upsample_rates)
    out_dim = c.block_dims(n - 1)[1]
    s[f"{d}{n + 1}.alpha"] = s[f"{d}{n + 1}.beta"] = (out_dim,)
    s[f"{d}{n + 2}.conv.weight"] = (1, out_dim, 7)
    s[f"{d}{n + 2}.conv.bias"] = (1,)
    return s


def random_decoder_tensors(c: SpeechDecoderConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random float32 tensors of the official names and shapes (benchmarks, parity
    checks), drawn one after the other from one generator by `random_decoder_tensor`."""
    rng = np.random.default_rng(seed)
    return {
        name: random_decoder_tensor(name, shape, rng)
        for name, shape in decoder_tensor_shapes(c).items()
    }


def random_decoder_tensor(name: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """One decoder tensor: linear and conv weights ~ N(0, 1/fan_in) (residual branches of the
    conv decoder 0.3x that, so float32 rounding does not compound block after block), norms,
    scales, SnakeBeta parameters and usages in plausible ranges."""
    f32 = np.float32

    def uniform(lo, hi):
        return f32(lo) + f32(hi - lo) * rng.random(shape, dtype=f32)

    leaf = name.rsplit(".", 1)[-1]
    if leaf == "cluster_usage":
        return uniform(0.5, 4.0)
    if leaf == "alpha":
        return f32(0.3) * rng.standard_normal(shape, dtype=f32)
    if leaf == "beta":  # 1/e^beta ~ 0.4: the sin^2 term matters without blowing up
        return f32(1.0) + f32(0.3) * rng.standard_normal(shape, dtype=f32)
    if leaf in ("scale", "gamma"):
        return uniform(0.01, 0.2)
    if "norm" in name and leaf == "weight":
        return uniform(0.8, 1.2)
    if leaf == "bias" or len(shape) == 1:
        return f32(0.02) * rng.standard_normal(shape, dtype=f32)
    fan_in = int(np.prod(shape[1:]))  # linear [out, in]; conv [out, in/groups, k]
    std = 1.0 / math.sqrt(fan_in)
    if ".block." in name and ".conv" in name and ".block.1." not in name:
        std *= 0.3  # unscaled, rounding noise grows ~10x per decoder block
    return f32(std) * rng.standard_normal(shape, dtype=f32)


def write_random_speech_tokenizer(folder, decoder_config: dict, seed: int = 0) -> int:
    """A speech_tokenizer folder (config.json + model.safetensors) holding seeded random
    decoder weights under the official names; returns the weight bytes. For benchmarks and
    full-size parity checks (no encoder weights: the decoder does not read them)."""
    from codecspec.graphs.safetensors_io import write_safetensors

    root = {
        "model_type": MODEL_TYPE,
        "decoder_config": dict(decoder_config),
        "output_sample_rate": 24000,
    }
    c = speech_decoder_config(root)
    root["decode_upsample_rate"] = c.samples_per_frame
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(root, f, indent=2)
    tensors = random_decoder_tensors(c, seed)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    return sum(a.nbytes for a in tensors.values())


# ---------------------------------------------------------------------- graph pieces
class _States:
    """The graph's state tensors, in order: input name, output name, shape; and the batch
    axis they and the activations lead with (1, or the symbolic "batch" of the batched
    graph: one row per stream)."""

    def __init__(self, batched: bool = False) -> None:
        self.entries: list[tuple[str, str, list]] = []
        self.batched = batched
        self.lead = "batch" if batched else 1

    def add(self, label: str, shape: list[int]) -> tuple[str, str]:
        pair = (f"state.{label}", f"state_out.{label}")
        self.entries.append((pair[0], pair[1], [self.lead, *shape[1:]]))
        return pair

    def dim0(self) -> int:
        """The leading dimension a Reshape target names: the input's own (0) when batched."""
        return 0 if self.batched else 1


def _scalar(g: GraphBuilder, value: int) -> str:
    """A 0-d int64 constant (`GraphBuilder.i64` stores arrays of rank >= 1)."""
    name = g.fresh("scalar")
    g.inits.append(numpy_helper.from_array(np.array(value, dtype=np.int64), name))
    return name


def _keep_last(g: GraphBuilder, cat: str, n: int, out: str) -> None:
    g.op("Slice", [cat, g.i64([-n]), g.i64([_INT64_MAX]), g.i64([2])], outputs=[out])


def _causal_conv(g, st, x, w, b, label, dilation=1, groups=1):
    """Conv1d with (k-1)*dilation frames of left context from the state (zeros at start)."""
    k = w.shape[-1]
    keep = (k - 1) * dilation
    cin = w.shape[1] * groups
    inputs = [g.init(f"{label}_w", w), g.init(f"{label}_b", b)]
    if keep == 0:
        return g.op("Conv", [x, *inputs], hint=label)
    s_in, s_out = st.add(label, [1, cin, keep])
    cat = g.op("Concat", [s_in, x], hint=f"{label}_in", axis=2)
    _keep_last(g, cat, keep, s_out)
    return g.op("Conv", [cat, *inputs], hint=label, dilations=[dilation], group=groups)


def _causal_trans_conv(g, st, x, w, b, stride, label):
    """ConvTranspose1d (weight [in, out, k]) with its last k - stride samples trimmed.

    Output sample p needs input frames floor(p/stride) back to (p-k+1)/stride, i.e. up to
    ceil(k/stride) - 1 earlier frames: those come from the state, and the samples they alone
    produce (the first `back * stride`) are sliced off, as are the trimmed right ones.
    """
    k = w.shape[-1]
    if k < stride:
        raise ValueError(f"{label}: kernel {k} < stride {stride} is not supported")
    back = -(-k // stride) - 1
    inputs = [g.init(f"{label}_w", w), g.init(f"{label}_b", b)]
    if back:
        s_in, s_out = st.add(label, [1, w.shape[0], back])
        x = g.op("Concat", [s_in, x], hint=f"{label}_in", axis=2)
        _keep_last(g, x, back, s_out)
    y = g.op("ConvTranspose", [x, *inputs], hint=label, strides=[stride])
    trim = k - stride
    if back == 0 and trim == 0:
        return y
    end = -trim if trim else _INT64_MAX
    return g.op(
        "Slice", [y, g.i64([back * stride]), g.i64([end]), g.i64([2])], hint=f"{label}_trim"
    )


def _snake(g, x, alpha, beta, label):
    """SnakeBeta: x + sin(x * e^alpha)^2 / (e^beta + 1e-9), constants folded in float32."""
    a = np.exp(alpha.astype(np.float32)).reshape(1, -1, 1)
    inv_b = (np.float32(1.0) / (np.exp(beta.astype(np.float32)) + np.float32(1e-9))).reshape(
        1, -1, 1
    )
    s = g.op("Sin", [g.op("Mul", [x, g.init(f"{label}_a", a)], hint=f"{label}_xa")])
    s2 = g.op("Mul", [s, s], hint=f"{label}_sin2")
    return g.op(
        "Add", [x, g.op("Mul", [s2, g.init(f"{label}_ib", inv_b)], hint=f"{label}_t")], hint=label
    )


def _linear(g, x, w, b, label):
    y = g.op("MatMul", [x, g.init(f"{label}_wt", np.ascontiguousarray(w.T))], hint=label)
    if b is not None:
        y = g.op("Add", [y, g.init(f"{label}_b", b)], hint=f"{label}_biased")
    return y


def _rms_norm(g, x, weight, eps, label):
    ms = g.op("ReduceMean", [g.op("Mul", [x, x])], hint=f"{label}_ms", axes=[-1], keepdims=1)
    r = g.op("Sqrt", [g.op("Add", [ms, g.f32(eps)])], hint=f"{label}_rms")
    return g.op("Mul", [g.op("Div", [x, r]), g.init(f"{label}_w", weight)], hint=label)


def _inv_freq(c: SpeechDecoderConfig) -> np.ndarray:
    """As transformers' default RoPE init computes it, in float32."""
    e = np.arange(0, c.head_dim, 2).astype(np.float32) / np.float32(c.head_dim)
    return (np.float32(1.0) / np.power(np.float32(c.rope_theta), e)).astype(np.float32)


# ---------------------------------------------------------------------- stages
def _dequantize(g: GraphBuilder, c: SpeechDecoderConfig, get, batched: bool = False) -> str:
    """codes [n, Q] -> [1, codebook_dim, n] (batched: [B, n, Q] -> [B, codebook_dim, n])."""
    q = _P + "quantizer."

    def table(part, k):
        cb = f"{q}{part}.vq.layers.{k}._codebook."
        usage = np.maximum(get(cb + "cluster_usage"), np.float32(1e-5))
        return (get(cb + "embedding_sum") / usage[:, None]).astype(np.float32)

    def proj(part):
        return np.ascontiguousarray(get(f"{q}{part}.output_proj.weight")[:, :, 0].T)

    K, Q = c.codebook_size, c.num_quantizers
    ax = 2 if batched else 1  # the codes' quantizer axis
    c0 = g.op("Gather", ["codes", _scalar(g, 0)], hint="codes_first", axis=ax)
    e0 = g.op("Gather", [g.init("rvq_first_table", table("rvq_first", 0)), c0], hint="e_first")
    first = g.op("MatMul", [e0, g.init("rvq_first_proj", proj("rvq_first"))], hint="q_first")
    rest_tab = np.concatenate([table("rvq_rest", k) for k in range(Q - 1)])
    cr = g.op("Slice", ["codes", g.i64([1]), g.i64([Q]), g.i64([ax])], hint="codes_rest")
    idx = g.op("Add", [cr, g.i64(np.arange(Q - 1) * K)], hint="rest_rows")
    er = g.op("Gather", [g.init("rvq_rest_table", rest_tab), idx], hint="e_rest")
    er = g.op("ReduceSum", [er, g.i64([ax])], hint="e_rest_sum", keepdims=0)
    rest = g.op("MatMul", [er, g.init("rvq_rest_proj", proj("rvq_rest"))], hint="q_rest")
    x = g.op("Add", [first, rest], hint="quantized")  # [n, D] ([B, n, D] batched)
    if not batched:
        x = g.op("Unsqueeze", [x, g.i64([0])], hint="quantized_b")
    return g.op("Transpose", [x], hint="quantized_nct", perm=[0, 2, 1])


def _attention_mask(g: GraphBuilder, c: SpeechDecoderConfig, n: str) -> tuple[str, str]:
    """(additive mask [n, W-1+n], query positions float [n])."""
    W = c.sliding_window
    pos = g.op("Squeeze", ["position", g.i64([0])], hint="pos0")
    end = g.op("Add", [pos, n], hint="pos_end")
    one = _scalar(g, 1)
    qpos = g.op("Range", [pos, end, one], hint="qpos")
    kstart = g.op("Sub", [pos, _scalar(g, W - 1)], hint="kpos0")
    kpos = g.op("Range", [kstart, end, one], hint="kpos")
    qcol = g.op("Unsqueeze", [qpos, g.i64([1])], hint="qpos_col")
    ok = g.op("GreaterOrEqual", [kpos, g.i64(0)], hint="k_valid")
    ok = g.op("And", [ok, g.op("LessOrEqual", [kpos, qcol], hint="k_causal")], hint="k_ok1")
    lo = g.op("Sub", [qcol, g.i64(W)], hint="k_lo")
    ok = g.op("And", [ok, g.op("Greater", [kpos, lo], hint="k_window")], hint="k_ok")
    mask = g.op("Where", [ok, g.f32(0.0), g.f32(-np.inf)], hint="attn_mask")
    return mask, g.op("Cast", [qpos], hint="qpos_f", to=TensorProto.FLOAT)


def _batched_mask(g: GraphBuilder, c: SpeechDecoderConfig, n: str) -> tuple[str, str]:
    """`_attention_mask` with one position per row (`position` [B]): (additive mask
    [B, 1, n, W-1+n], query positions float [B, n]); the same integers row by row."""
    W = c.sliding_window
    pos = g.op("Unsqueeze", ["position", g.i64([1])], hint="pos_col")  # [B, 1]
    zero, one = _scalar(g, 0), _scalar(g, 1)
    qpos = g.op("Add", [pos, g.op("Range", [zero, n, one], hint="q_steps")], hint="qpos")
    span = g.op("Add", [n, _scalar(g, W - 1)], hint="k_span")
    kpos0 = g.op("Sub", [pos, _scalar(g, W - 1)], hint="kpos0")
    kpos = g.op("Add", [kpos0, g.op("Range", [zero, span, one], hint="k_steps")], hint="kpos")
    kpos = g.op("Unsqueeze", [kpos, g.i64([1])], hint="kpos_row")  # [B, 1, W-1+n]
    qcol = g.op("Unsqueeze", [qpos, g.i64([2])], hint="qpos_col")  # [B, n, 1]
    ok = g.op("GreaterOrEqual", [kpos, g.i64(0)], hint="k_valid")
    ok = g.op("And", [ok, g.op("LessOrEqual", [kpos, qcol], hint="k_causal")], hint="k_ok1")
    lo = g.op("Sub", [qcol, g.i64(W)], hint="k_lo")
    ok = g.op("And", [ok, g.op("Greater", [kpos, lo], hint="k_window")], hint="k_ok")
    mask = g.op("Where", [ok, g.f32(0.0), g.f32(-np.inf)], hint="attn_mask")
    mask = g.op("Unsqueeze", [mask, g.i64([1])], hint="attn_mask_heads")
    return mask, g.op("Cast", [qpos], hint="qpos_f", to=TensorProto.FLOAT)


def _rope(
    g: GraphBuilder, c: SpeechDecoderConfig, qpos_f: str, batched: bool = False
) -> tuple[str, str]:
    ax = 2 if batched else 1  # positions [n] or [B, n]: the angle axis after them
    ang = g.op(
        "Mul",
        [
            g.op("Unsqueeze", [qpos_f, g.i64([ax])], hint="qpos_fc"),
            g.init("inv_freq", _inv_freq(c)[None, :]),
        ],
        hint="rope_angles",
    )
    emb = g.op("Concat", [ang, ang], hint="rope_emb", axis=ax)
    cos, sin = g.op("Cos", [emb], hint="rope_cos"), g.op("Sin", [emb], hint="rope_sin")
    if batched:  # [B, n, hd] -> [B, 1, n, hd], broadcast over the heads
        cos = g.op("Unsqueeze", [cos, g.i64([1])], hint="rope_cos_heads")
        sin = g.op("Unsqueeze", [sin, g.i64([1])], hint="rope_sin_heads")
    return cos, sin


def _rotate(g: GraphBuilder, x: str, cos: str, sin: str, half: int, label: str) -> str:
    x1, x2 = g.op("Split", [x, g.i64([half, half])], hint=f"{label}_h", n_out=2, axis=-1)
    rot = g.op("Concat", [g.op("Neg", [x2]), x1], hint=f"{label}_rot", axis=-1)
    a = g.op("Mul", [x, cos], hint=f"{label}_c")
    return g.op("Add", [a, g.op("Mul", [rot, sin], hint=f"{label}_s")], hint=label)


def _attention(g, st, c, x, get, i, mask, cos, sin) -> str:
    lp = f"{_P}pre_transformer.layers.{i}.self_attn."
    H, KVH, hd, W = c.num_heads, c.num_kv_heads, c.head_dim, c.sliding_window

    def proj(name, heads):
        b = get(f"{lp}{name}_proj.bias") if c.attention_bias else None
        y = _linear(g, x, get(f"{lp}{name}_proj.weight"), b, f"l{i}_{name}")
        y = g.op("Reshape", [y, g.i64([st.dim0(), -1, heads, hd])], hint=f"l{i}_{name}_4d")
        return g.op("Transpose", [y], hint=f"l{i}_{name}_h", perm=[0, 2, 1, 3])

    q = _rotate(g, proj("q", H), cos, sin, hd // 2, f"l{i}_q_rope")
    k = _rotate(g, proj("k", KVH), cos, sin, hd // 2, f"l{i}_k_rope")
    v = proj("v", KVH)
    kv = []
    for name, t in (("k", k), ("v", v)):
        if W > 1:
            s_in, s_out = st.add(f"layer{i}.{name}", [1, KVH, W - 1, hd])
            t = g.op("Concat", [s_in, t], hint=f"l{i}_{name}_all", axis=2)
            _keep_last(g, t, W - 1, s_out)
        if KVH != H:
            t = g.op("Unsqueeze", [t, g.i64([2])], hint=f"l{i}_{name}_5d")
            t = g.op("Expand", [t, g.i64([1, 1, H // KVH, 1, 1])], hint=f"l{i}_{name}_rep")
            t = g.op("Reshape", [t, g.i64([st.dim0(), H, -1, hd])], hint=f"l{i}_{name}_gqa")
        kv.append(t)
    kt = g.op("Transpose", [kv[0]], hint=f"l{i}_kt", perm=[0, 1, 3, 2])
    s = g.op("MatMul", [q, kt], hint=f"l{i}_scores")
    s = g.op("Mul", [s, g.f32(hd**-0.5)], hint=f"l{i}_scaled")
    s = g.op("Add", [s, mask], hint=f"l{i}_masked")
    p = g.op("Softmax", [s], hint=f"l{i}_probs", axis=-1)
    o = g.op("MatMul", [p, kv[1]], hint=f"l{i}_ctx")
    o = g.op("Transpose", [o], hint=f"l{i}_ctx_t", perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.i64([st.dim0(), -1, H * hd])], hint=f"l{i}_ctx_flat")
    b = get(lp + "o_proj.bias") if c.attention_bias else None
    return _linear(g, o, get(lp + "o_proj.weight"), b, f"l{i}_o")


def _transformer(g, st, c, x_nct, n, get) -> str:
    """[1, latent, n] -> [1, latent, n]."""
    t = _P + "pre_transformer."
    x = g.op("Transpose", [x_nct], hint="tf_in", perm=[0, 2, 1])
    x = _linear(g, x, get(t + "input_proj.weight"), get(t + "input_proj.bias"), "tf_input_proj")
    mask, qpos_f = (_batched_mask if st.batched else _attention_mask)(g, c, n)
    cos, sin = _rope(g, c, qpos_f, st.batched)
    eps = c.rms_norm_eps
    for i in range(c.num_layers):
        lp = f"{t}layers.{i}."
        h = _rms_norm(g, x, get(lp + "input_layernorm.weight"), eps, f"l{i}_norm1")
        a = _attention(g, st, c, h, get, i, mask, cos, sin)
        a = g.op("Mul", [a, g.init(f"l{i}_ls1", get(lp + "self_attn_layer_scale.scale"))])
        x = g.op("Add", [x, a], hint=f"l{i}_res1")
        h = _rms_norm(g, x, get(lp + "post_attention_layernorm.weight"), eps, f"l{i}_norm2")
        gate = _linear(g, h, get(lp + "mlp.gate_proj.weight"), None, f"l{i}_gate")
        up = _linear(g, h, get(lp + "mlp.up_proj.weight"), None, f"l{i}_up")
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])], hint=f"l{i}_silu")
        m = _linear(g, g.op("Mul", [act, up]), get(lp + "mlp.down_proj.weight"), None, f"l{i}_dn")
        m = g.op("Mul", [m, g.init(f"l{i}_ls2", get(lp + "mlp_layer_scale.scale"))])
        x = g.op("Add", [x, m], hint=f"l{i}_res2")
    x = _rms_norm(g, x, get(t + "norm.weight"), eps, "tf_norm")
    x = _linear(g, x, get(t + "output_proj.weight"), get(t + "output_proj.bias"), "tf_out_proj")
    return g.op("Transpose", [x], hint="tf_out", perm=[0, 2, 1])


def _convnext(g, st, x, get, j) -> str:
    u = f"{_P}upsample.{j}.1."
    w = get(u + "dwconv.conv.weight")
    y = _causal_conv(g, st, x, w, get(u + "dwconv.conv.bias"), f"up{j}_dw", groups=w.shape[0])
    y = g.op("Transpose", [y], hint=f"up{j}_ntc", perm=[0, 2, 1])
    y = g.op(
        "LayerNormalization",
        [
            y,
            g.init(f"up{j}_ln_w", get(u + "norm.weight")),
            g.init(f"up{j}_ln_b", get(u + "norm.bias")),
        ],
        hint=f"up{j}_ln",
        axis=-1,
        epsilon=1e-6,
    )
    y = _linear(g, y, get(u + "pwconv1.weight"), get(u + "pwconv1.bias"), f"up{j}_pw1")
    erf = g.op("Erf", [g.op("Mul", [y, g.f32(1.0 / math.sqrt(2.0))])], hint=f"up{j}_erf")
    half_y = g.op("Mul", [y, g.f32(0.5)])
    y = g.op("Mul", [half_y, g.op("Add", [erf, g.f32(1.0)])], hint=f"up{j}_gelu")
    y = _linear(g, y, get(u + "pwconv2.weight"), get(u + "pwconv2.bias"), f"up{j}_pw2")
    y = g.op("Mul", [y, g.init(f"up{j}_gamma", get(u + "gamma"))], hint=f"up{j}_scaled")
    y = g.op("Transpose", [y], hint=f"up{j}_nct", perm=[0, 2, 1])
    return g.op("Add", [x, y], hint=f"up{j}_out")


def _upsample(g, st, c, x, get) -> str:
    for j, f in enumerate(c.upsampling_ratios):
        u = f"{_P}upsample.{j}.0.conv."
        x = _causal_trans_conv(g, st, x, get(u + "weight"), get(u + "bias"), f, f"up{j}_tconv")
        x = _convnext(g, st, x, get, j)
    return x


def _conv_decoder(g, st, c, x, get) -> str:
    d = _P + "decoder."
    x = _causal_conv(g, st, x, get(d + "0.conv.weight"), get(d + "0.conv.bias"), "dec_in")
    for i, r in enumerate(c.upsample_rates):
        b = f"{d}{i + 1}.block."
        x = _snake(g, x, get(b + "0.alpha"), get(b + "0.beta"), f"b{i}_snake")
        w, bias = get(b + "1.conv.weight"), get(b + "1.conv.bias")
        x = _causal_trans_conv(g, st, x, w, bias, r, f"b{i}_tconv")
        for u, dil in enumerate(_DILATIONS):
            ru, lab = f"{b}{u + 2}.", f"b{i}_ru{u}"
            y = _snake(g, x, get(ru + "act1.alpha"), get(ru + "act1.beta"), f"{lab}_snake1")
            w, bias = get(ru + "conv1.conv.weight"), get(ru + "conv1.conv.bias")
            y = _causal_conv(g, st, y, w, bias, f"{lab}_conv1", dilation=dil)
            y = _snake(g, y, get(ru + "act2.alpha"), get(ru + "act2.beta"), f"{lab}_snake2")
            w, bias = get(ru + "conv2.conv.weight"), get(ru + "conv2.conv.bias")
            y = _causal_conv(g, st, y, w, bias, f"{lab}_conv2")
            x = g.op("Add", [x, y], hint=f"{lab}_out")
    n = len(c.upsample_rates)
    x = _snake(g, x, get(f"{d}{n + 1}.alpha"), get(f"{d}{n + 1}.beta"), "out_snake")
    x = _causal_conv(g, st, x, get(f"{d}{n + 2}.conv.weight"), get(f"{d}{n + 2}.conv.bias"), "out")
    x = g.op("Clip", [x, g.f32(-1.0), g.f32(1.0)], hint="wave")
    flat = [0, -1] if st.batched else [-1]  # [B, samples] or [samples]
    return g.op("Reshape", [x, g.i64(flat)], outputs=["audio"])


# ---------------------------------------------------------------------- assembly
def build_speech_decoder_graph(
    c: SpeechDecoderConfig,
    get: Callable[[str], np.ndarray],
    opset: int = 17,
    batched: bool = False,
) -> onnx.ModelProto:
    """The stateful decoder graph; `get(name)` returns a checkpoint tensor as float32.

    Tensor shapes are checked against `decoder_tensor_shapes` first (ValueError naming the
    tensor), so a checkpoint of another shape never yields a graph.

    `batched`: the same operators over a leading batch axis, one row per stream, each with
    its own position and state (codes [B, n, Q], position [B], every state [B, ...],
    audio [B, n * samples_per_frame]); the frame count n is shared. Its weights are the
    lone graph's, under the same names.
    """
    shapes = decoder_tensor_shapes(c)

    def fetch(name: str) -> np.ndarray:
        a = np.asarray(get(name), dtype=np.float32)
        if tuple(a.shape) != shapes[name]:
            raise ValueError(
                f"tensor {name!r} has shape {list(a.shape)}, expected {list(shapes[name])}"
            )
        return a

    g, st = GraphBuilder(), _States(batched)
    shape = g.op("Shape", ["codes"], hint="codes_shape")
    n = g.op("Gather", [shape, _scalar(g, 1 if batched else 0)], hint="n_frames")
    x = _dequantize(g, c, fetch, batched)
    pre = _P + "pre_conv.conv."
    x = _causal_conv(g, st, x, fetch(pre + "weight"), fetch(pre + "bias"), "pre_conv")
    x = _transformer(g, st, c, x, n, fetch)
    x = _upsample(g, st, c, x, fetch)
    _conv_decoder(g, st, c, x, fetch)

    f32 = TensorProto.FLOAT
    lead = ["batch"] if batched else []
    inputs = [
        helper.make_tensor_value_info("codes", TensorProto.INT64, [*lead, "n", c.num_quantizers]),
        helper.make_tensor_value_info("position", TensorProto.INT64, [st.lead]),
    ]
    outputs = [helper.make_tensor_value_info("audio", f32, [*lead, "samples"])]
    for s_in, s_out, shape in st.entries:
        inputs.append(helper.make_tensor_value_info(s_in, f32, shape))
        outputs.append(helper.make_tensor_value_info(s_out, f32, shape))
    graph = helper.make_graph(g.nodes, "qwen3_speech_decoder", inputs, outputs, g.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="codecspec"
    )
    model.ir_version = 8
    meta = {"version": DECODER_GRAPH_VERSION, "config": json.loads(c.to_json())}
    helper.set_model_props(model, {_META: json.dumps(meta)})
    return model


def state_io_names(model_or_inputs) -> list[tuple[str, str, list[int]]]:
    """(input name, output name, shape) of each state tensor of a built decoder graph; takes a
    ModelProto or an onnxruntime session's `get_inputs()` list."""
    if isinstance(model_or_inputs, onnx.ModelProto):
        items = [
            (vi.name, [d.dim_value for d in vi.type.tensor_type.shape.dim])
            for vi in model_or_inputs.graph.input
        ]
    else:
        items = [(i.name, list(i.shape)) for i in model_or_inputs]
    return [
        (name, "state_out." + name[len("state.") :], [int(d) for d in shape])
        for name, shape in items
        if name.startswith("state.")
    ]


def attention_shapes(lp: str, c) -> dict:
    """Tensor name -> shape of one transformer layer's attention projections (prefix `lp`;
    the speech tokenizer's decoder and encoder layers share this layout)."""
    H, hd = c.hidden_size, c.head_dim
    s = {}
    proj = {"q": c.num_heads * hd, "k": c.num_kv_heads * hd, "v": c.num_kv_heads * hd}
    for name, out in proj.items():
        s[f"{lp}self_attn.{name}_proj.weight"] = (out, H)
        if c.attention_bias:
            s[f"{lp}self_attn.{name}_proj.bias"] = (out,)
    s[lp + "self_attn.o_proj.weight"] = (H, c.num_heads * hd)
    if c.attention_bias:
        s[lp + "self_attn.o_proj.bias"] = (H,)
    return s
