"""ONNX graph of the Qwen3-TTS 12 Hz speech tokenizer's encoder (24 kHz audio -> codes), built
from its safetensors with numpy and the onnx helper, without torch.

The official encoder (`Qwen3TTSTokenizerV2Encoder`, qwen_tts 0.1.1) is transformers' MimiModel
without its decoder half; `Qwen3TTSTokenizerV2Model.encode` keeps the first
`encoder_valid_num_quantizers` codes. What it computes on one clip (transformers 4.57,
models/mimi/modeling_mimi.py):

1. SEANet conv encoder: causal conv -> per ratio of reversed(upsampling_ratios) residual
   blocks (ELU, conv k=3 dilated, ELU, conv 1x1, residual) then ELU + strided conv (kernel
   2r, stride r) doubling the channels -> ELU + causal conv to hidden_size. A causal conv pads
   (kernel - stride) zeros on the left and, when strided, zeros on the right up to a multiple
   of the stride (so T samples give ceil(T / r) frames);
2. the encoder transformer: LayerNorm (with bias) + causal attention with RoPE (rotate-half)
   + layer scale, LayerNorm + MLP (fc1, erf GELU, fc2) + layer scale. `create_causal_mask`
   builds a plain causal mask: the config's sliding_window is not applied;
3. downsample: conv kernel 4, stride 2, no bias, padded by repeating the edge frames;
4. split RVQ encode: the semantic quantizer (its own 1x1 input projection, then its
   codebooks) and the acoustic one (its own input projection from the same input); each
   codebook picks the nearest entry (Euclidean) of `embed_sum / clamp(cluster_usage, 1e-5)`
   and passes the residual on.

Graph I/O (batch 1): audio float32 [T] (T >= 1) -> codes int64 [ceil(T / 1920), Q].
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from codecspec.graphs.builder import GraphBuilder

from .decoder_graph import attention_shapes

__all__ = [
    "ENCODER_GRAPH_VERSION",
    "SpeechEncoderConfig",
    "speech_encoder_config",
    "encoder_tensor_shapes",
    "build_speech_encoder_graph",
]

ENCODER_GRAPH_VERSION = "1"
_P = "encoder."
_META = "codecspec.qwen3_speech_encoder"
_CODEBOOK_EPS = 1e-5  # MimiEuclideanCodebook's epsilon

# MimiConfig defaults for keys an encoder_config may omit.
_DEFAULTS = {
    "sampling_rate": 24000,
    "audio_channels": 1,
    "hidden_size": 512,
    "num_filters": 64,
    "num_residual_layers": 1,
    "upsampling_ratios": [8, 6, 5, 4],
    "kernel_size": 7,
    "last_kernel_size": 3,
    "residual_kernel_size": 3,
    "dilation_growth_rate": 2,
    "compress": 2,
    "codebook_size": 2048,
    "codebook_dim": 256,
    "num_quantizers": 32,
    "vector_quantization_hidden_dimension": 256,
    "num_semantic_quantizers": 1,
    "num_hidden_layers": 8,
    "intermediate_size": 2048,
    "num_attention_heads": 8,
    "norm_eps": 1e-5,
    "rope_theta": 10000.0,
}


@dataclass(frozen=True)
class SpeechEncoderConfig:
    sample_rate: int
    hidden_size: int
    num_filters: int
    num_residual_layers: int
    ratios: tuple  # the strided convs in encoder order (reversed upsampling_ratios)
    kernel_size: int
    last_kernel_size: int
    residual_kernel_size: int
    dilation_growth_rate: int
    compress: int
    conv_shortcut: bool
    downsample_kernel: int  # 0: no downsampling layer
    codebook_size: int
    codebook_dim: int
    vq_dim: int
    num_semantic: int
    num_quantizers: int  # codes kept (encoder_valid_num_quantizers)
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    norm_eps: float
    rope_theta: float
    attention_bias: bool

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.ratios) * (2 if self.downsample_kernel else 1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _get(d: dict, key: str):
    v = d.get(key)
    return _DEFAULTS[key] if v is None else v


def _pos_int(d: dict, key: str) -> int:
    v = _get(d, key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"encoder_config.{key} must be a positive int, got {v!r}")
    return v


def _frame_rates(d: dict, hop: int) -> tuple[float, float]:
    """(rate after the conv encoder, rate of the codes), as MimiConfig derives them."""
    sr = _pos_int(d, "sampling_rate")
    conv_rate = math.ceil(sr / hop)
    rate = d.get("_frame_rate") or d.get("frame_rate") or sr / (hop * 2)
    return conv_rate, float(rate)


def _check_supported(d: dict) -> None:
    if not d.get("use_causal_conv", True):
        raise ValueError("encoder_config.use_causal_conv=false is not supported")
    if d.get("pad_mode", "constant") != "constant":
        raise ValueError(f"encoder_config.pad_mode={d['pad_mode']!r} is not supported")
    if d.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"encoder_config.hidden_act={d['hidden_act']!r} is not supported")
    if _get(d, "audio_channels") != 1:
        raise ValueError("encoder_config.audio_channels must be 1")
    rs = d.get("rope_scaling")
    if isinstance(rs, dict) and rs.get("rope_type", rs.get("type", "default")) != "default":
        raise ValueError(f"encoder_config.rope_scaling={rs!r} is not supported (default only)")


def speech_encoder_config(root: dict) -> SpeechEncoderConfig:
    """SpeechEncoderConfig from a parsed speech_tokenizer/config.json (ValueError otherwise)."""
    d = root.get("encoder_config") if isinstance(root, dict) else None
    if not isinstance(d, dict):
        raise ValueError("config.json: missing 'encoder_config'")
    _check_supported(d)
    ratios = tuple(reversed([int(r) for r in _get(d, "upsampling_ratios")]))
    conv_rate, rate = _frame_rates(d, math.prod(ratios))
    down = 2 * int(conv_rate / rate) if rate != conv_rate else 0
    heads = _pos_int(d, "num_attention_heads")
    hidden = _pos_int(d, "hidden_size")
    total = _pos_int(d, "num_quantizers")
    valid = root.get("encoder_valid_num_quantizers", 16)
    c = SpeechEncoderConfig(
        sample_rate=_pos_int(d, "sampling_rate"),
        hidden_size=hidden,
        num_filters=_pos_int(d, "num_filters"),
        num_residual_layers=_pos_int(d, "num_residual_layers"),
        ratios=ratios,
        kernel_size=_pos_int(d, "kernel_size"),
        last_kernel_size=_pos_int(d, "last_kernel_size"),
        residual_kernel_size=_pos_int(d, "residual_kernel_size"),
        dilation_growth_rate=_pos_int(d, "dilation_growth_rate"),
        compress=_pos_int(d, "compress"),
        conv_shortcut=bool(d.get("use_conv_shortcut", False)),
        downsample_kernel=down,
        codebook_size=_pos_int(d, "codebook_size"),
        codebook_dim=_pos_int(d, "codebook_dim"),
        vq_dim=_pos_int(d, "vector_quantization_hidden_dimension"),
        num_semantic=_pos_int(d, "num_semantic_quantizers"),
        num_quantizers=min(int(valid), total),
        num_layers=_pos_int(d, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=int(d.get("num_key_value_heads") or heads),
        head_dim=int(d.get("head_dim") or hidden // heads),
        intermediate_size=_pos_int(d, "intermediate_size"),
        norm_eps=float(_get(d, "norm_eps")),
        rope_theta=float(_get(d, "rope_theta")),
        attention_bias=bool(d.get("attention_bias", False)),
    )
    if c.vq_dim != c.codebook_dim:
        raise ValueError(
            "encoder_config: vector_quantization_hidden_dimension "
            f"{c.vq_dim} != codebook_dim {c.codebook_dim} (the official encode cannot run)"
        )
    if c.num_quantizers <= c.num_semantic:
        raise ValueError("encoder_valid_num_quantizers must exceed num_semantic_quantizers")
    return c


# ---------------------------------------------------------------------- checkpoint tensors
def _conv_layers(c: SpeechEncoderConfig) -> list[tuple[str, int, int, int, int, int]]:
    """(name, in, out, kernel, stride, dilation) of every conv of the SEANet encoder, in the
    order MimiEncoder builds `layers` (ELUs take an index too)."""
    out = [("layers.0", 1, c.num_filters, c.kernel_size, 1, 1)]
    i, ch = 1, c.num_filters
    for r in c.ratios:
        for j in range(c.num_residual_layers):
            hid = ch // c.compress
            dil = c.dilation_growth_rate**j
            out.append((f"layers.{i}.block.1", ch, hid, c.residual_kernel_size, 1, dil))
            out.append((f"layers.{i}.block.3", hid, ch, 1, 1, 1))
            if c.conv_shortcut:
                out.append((f"layers.{i}.shortcut", ch, ch, 1, 1, 1))
            i += 1
        out.append((f"layers.{i + 1}", ch, 2 * ch, 2 * r, r, 1))
        i, ch = i + 2, 2 * ch
    out.append((f"layers.{i + 1}", ch, c.hidden_size, c.last_kernel_size, 1, 1))
    return out


def _quantizers(c: SpeechEncoderConfig) -> list[tuple[str, int]]:
    """(prefix, codebooks used) of the semantic and the acoustic RVQ."""
    q = _P + "quantizer."
    return [
        (q + "semantic_residual_vector_quantizer.", c.num_semantic),
        (q + "acoustic_residual_vector_quantizer.", c.num_quantizers - c.num_semantic),
    ]


def encoder_tensor_shapes(c: SpeechEncoderConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> shape of every tensor the encoder graph reads."""
    s: dict[str, tuple[int, ...]] = {}
    for name, cin, cout, k, _, _ in _conv_layers(c):
        s[f"{_P}encoder.{name}.conv.weight"] = (cout, cin, k)
        s[f"{_P}encoder.{name}.conv.bias"] = (cout,)
    H = c.hidden_size
    for i in range(c.num_layers):
        lp = f"{_P}encoder_transformer.layers.{i}."
        s.update(attention_shapes(lp, c))
        s[lp + "mlp.fc1.weight"] = (c.intermediate_size, H)
        s[lp + "mlp.fc2.weight"] = (H, c.intermediate_size)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            s[f"{lp}{norm}.weight"] = s[f"{lp}{norm}.bias"] = (H,)
        s[lp + "self_attn_layer_scale.scale"] = (H,)
        s[lp + "mlp_layer_scale.scale"] = (H,)
    if c.downsample_kernel:
        s[_P + "downsample.conv.weight"] = (H, H, c.downsample_kernel)
    for prefix, n in _quantizers(c):
        if c.vq_dim != H:
            s[prefix + "input_proj.weight"] = (c.vq_dim, H, 1)
        for k in range(n):
            cb = f"{prefix}layers.{k}.codebook."
            s[cb + "embed_sum"] = (c.codebook_size, c.codebook_dim)
            s[cb + "cluster_usage"] = (c.codebook_size,)
    return s


# ---------------------------------------------------------------------- graph pieces
def _pad_time(g: GraphBuilder, x: str, left: int, stride: int, mode: str, label: str) -> str:
    """x [1, C, L] with `left` frames in front and, for stride > 1, (-L) mod stride behind:
    MimiConv1d's causal padding (its 'extra padding' is 0 for stride 1)."""
    if stride == 1:
        if not left:
            return x
        pads = g.i64([0, 0, left, 0, 0, 0])
    else:
        length = g.op("Gather", [g.op("Shape", [x]), g.i64([2])], hint=f"{label}_len")  # [1]
        right = g.op("Mod", [g.op("Neg", [length]), g.i64([stride])], hint=f"{label}_extra")
        pads = g.op("Concat", [g.i64([0, 0, left, 0, 0]), right], axis=0, hint=f"{label}_pads")
    return g.op("Pad", [x, pads], mode=mode, hint=f"{label}_padded")


def _conv(g, x, w, b, label, stride=1, dilation=1, mode="constant") -> str:
    left = (w.shape[-1] - 1) * dilation + 1 - stride
    x = _pad_time(g, x, left, stride, mode, label)
    inputs = [x, g.init(f"{label}_w", w)]
    if b is not None:
        inputs.append(g.init(f"{label}_b", b))
    return g.op("Conv", inputs, strides=[stride], dilations=[dilation], hint=label)


def _seanet(g: GraphBuilder, c: SpeechEncoderConfig, x: str, get) -> str:
    convs = {name: (k, s, d) for name, _, _, k, s, d in _conv_layers(c)}

    def conv(name, h):
        _, s, d = convs[name]
        p = f"{_P}encoder.{name}.conv."
        return _conv(g, h, get(p + "weight"), get(p + "bias"), name, stride=s, dilation=d)

    x = conv("layers.0", x)
    i = 1
    for _ in c.ratios:
        for _ in range(c.num_residual_layers):
            h = conv(f"layers.{i}.block.1", g.op("Elu", [x], alpha=1.0))
            h = conv(f"layers.{i}.block.3", g.op("Elu", [h], alpha=1.0))
            skip = conv(f"layers.{i}.shortcut", x) if c.conv_shortcut else x
            x = g.op("Add", [skip, h], hint=f"res{i}")
            i += 1
        x = conv(f"layers.{i + 1}", g.op("Elu", [x], alpha=1.0))
        i += 2
    return conv(f"layers.{i + 1}", g.op("Elu", [x], alpha=1.0))


def _linear(g, x, w, b, label):
    y = g.op("MatMul", [x, g.init(f"{label}_wt", np.ascontiguousarray(w.T))], hint=label)
    return g.op("Add", [y, g.init(f"{label}_b", b)]) if b is not None else y


def _positions(g: GraphBuilder, x: str, hint: str) -> str:
    """0..T-1 for x [1, T, H]. Range takes scalars, and the graph's constants are at least
    1-D, hence the squeezes."""
    length = g.op("Gather", [g.op("Shape", [x]), g.i64([1])])
    scalar = [g.op("Squeeze", [v, g.i64([0])]) for v in (g.i64([0]), length, g.i64([1]))]
    return g.op("Range", scalar, hint=hint)


def _rope_tables(g: GraphBuilder, c: SpeechEncoderConfig, x: str) -> tuple[str, str]:
    """cos, sin [T, head_dim] for positions 0..T-1 (x [1, T, H]), in float32 as
    MimiRotaryEmbedding computes them."""
    hd = c.head_dim
    inv = 1.0 / (np.float32(c.rope_theta) ** (np.arange(0, hd, 2).astype(np.float32) / hd))
    pos = _positions(g, x, "positions")
    pos = g.op("Cast", [g.op("Unsqueeze", [pos, g.i64([1])])], to=TensorProto.FLOAT)
    freqs = g.op("MatMul", [pos, g.init("inv_freq", inv.astype(np.float32)[None, :])])
    emb = g.op("Concat", [freqs, freqs], axis=1, hint="rope_angles")
    return g.op("Cos", [emb], hint="rope_cos"), g.op("Sin", [emb], hint="rope_sin")


def _causal_bias(g: GraphBuilder, x: str) -> str:
    """[T, T] additive mask: 0 on and below the diagonal, -inf above."""
    idx = _positions(g, x, "mask_idx")
    row = g.op("Unsqueeze", [idx, g.i64([1])])
    col = g.op("Unsqueeze", [idx, g.i64([0])])
    future = g.op("Greater", [col, row], hint="future")
    return g.op("Where", [future, g.f32(-np.inf), g.f32(0.0)], hint="causal_bias")


def _heads(g, x, n, hd, label) -> str:
    """[1, T, n*hd] -> [1, n, T, hd]."""
    y = g.op("Reshape", [x, g.i64([1, -1, n, hd])], hint=f"{label}_split")
    return g.op("Transpose", [y], perm=[0, 2, 1, 3], hint=f"{label}_heads")


def _rotate(g, x, cos, sin, hd, label) -> str:
    half = hd // 2
    x1, x2 = g.op("Split", [x, g.i64([half, half])], axis=3, n_out=2, hint=f"{label}_halves")
    rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=3, hint=f"{label}_rot")
    a = g.op("Mul", [x, cos])
    return g.op("Add", [a, g.op("Mul", [rot, sin])], hint=f"{label}_roped")


def _repeat_kv(g, x, c, label) -> str:
    rep = c.num_heads // c.num_kv_heads
    if rep == 1:
        return x
    y = g.op("Unsqueeze", [x, g.i64([2])])
    shape = g.op("Shape", [y])
    tail = g.op("Slice", [shape, g.i64([3]), g.i64([5])])
    full = g.op("Concat", [g.i64([1, c.num_kv_heads, rep]), tail], axis=0)
    y = g.op("Expand", [y, full], hint=f"{label}_rep")
    return g.op("Reshape", [y, g.i64([1, c.num_heads, -1, c.head_dim])], hint=f"{label}_all")


def _attention(g, c, x, get, lp, rope, bias, label) -> str:
    hd = c.head_dim
    a = lp + "self_attn."

    def proj(name):
        b = get(f"{a}{name}_proj.bias") if c.attention_bias else None
        return _linear(g, x, get(f"{a}{name}_proj.weight"), b, f"{label}_{name}")

    q = _rotate(g, _heads(g, proj("q"), c.num_heads, hd, f"{label}_q"), *rope, hd, f"{label}_q")
    k = _rotate(g, _heads(g, proj("k"), c.num_kv_heads, hd, f"{label}_k"), *rope, hd, f"{label}_k")
    v = _heads(g, proj("v"), c.num_kv_heads, hd, f"{label}_v")
    k, v = _repeat_kv(g, k, c, f"{label}_k"), _repeat_kv(g, v, c, f"{label}_v")
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    s = g.op("Mul", [g.op("MatMul", [q, kt]), g.f32(1.0 / math.sqrt(hd))], hint=f"{label}_s")
    p = g.op("Softmax", [g.op("Add", [s, bias])], axis=-1, hint=f"{label}_p")
    o = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.i64([1, -1, c.num_heads * hd])], hint=f"{label}_o")
    ob = get(a + "o_proj.bias") if c.attention_bias else None
    return _linear(g, o, get(a + "o_proj.weight"), ob, f"{label}_out")


def _layer_norm(g, x, get, name, eps, label) -> str:
    w, b = g.init(f"{label}_w", get(name + ".weight")), g.init(f"{label}_b", get(name + ".bias"))
    return g.op("LayerNormalization", [x, w, b], axis=-1, epsilon=eps, hint=label)


def _gelu(g, x, label) -> str:
    """The exact (erf) GELU of ACT2FN['gelu']."""
    e = g.op("Erf", [g.op("Mul", [x, g.f32(1.0 / math.sqrt(2.0))])])
    return g.op("Mul", [g.op("Mul", [x, g.f32(0.5)]), g.op("Add", [e, g.f32(1.0)])], hint=label)


def _transformer(g: GraphBuilder, c: SpeechEncoderConfig, x: str, get) -> str:
    """x [1, T, H] through the encoder transformer's layers."""
    rope, bias = _rope_tables(g, c, x), _causal_bias(g, x)
    for i in range(c.num_layers):
        lp, lb = f"{_P}encoder_transformer.layers.{i}.", f"tf{i}"
        h = _layer_norm(g, x, get, lp + "input_layernorm", c.norm_eps, f"{lb}_ln1")
        h = _attention(g, c, h, get, lp, rope, bias, f"{lb}_attn")
        h = g.op("Mul", [h, g.init(f"{lb}_ls1", get(lp + "self_attn_layer_scale.scale"))])
        x = g.op("Add", [x, h], hint=f"{lb}_x1")
        h = _layer_norm(g, x, get, lp + "post_attention_layernorm", c.norm_eps, f"{lb}_ln2")
        h = _gelu(g, _linear(g, h, get(lp + "mlp.fc1.weight"), None, f"{lb}_fc1"), f"{lb}_act")
        h = _linear(g, h, get(lp + "mlp.fc2.weight"), None, f"{lb}_fc2")
        h = g.op("Mul", [h, g.init(f"{lb}_ls2", get(lp + "mlp_layer_scale.scale"))])
        x = g.op("Add", [x, h], hint=f"{lb}_x2")
    return x


def _codebook(get, prefix: str) -> np.ndarray:
    """The codebook's entries, divided in float32 as MimiEuclideanCodebook.embed does."""
    usage = np.maximum(get(prefix + "cluster_usage").astype(np.float32), np.float32(_CODEBOOK_EPS))
    return (get(prefix + "embed_sum").astype(np.float32) / usage[:, None]).astype(np.float32)


def _rvq(g: GraphBuilder, c: SpeechEncoderConfig, x: str, get, prefix: str, n: int, label) -> list:
    """Codes int64 [F] of n codebooks from x [F, H] (residual quantisation)."""
    if c.vq_dim != c.hidden_size:
        w = get(prefix + "input_proj.weight")[:, :, 0]
        x = _linear(g, x, w, None, f"{label}_in")
    codes = []
    for k in range(n):
        e = _codebook(get, f"{prefix}layers.{k}.codebook.")
        # argmin |x - e|^2 = argmin (|e|^2 - 2 x.e): |x|^2 is the same for every entry
        dots = g.op("MatMul", [x, g.init(f"{label}{k}_et", np.ascontiguousarray(e.T))])
        sq = g.init(f"{label}{k}_e2", (e.astype(np.float64) ** 2).sum(1).astype(np.float32))
        d = g.op("Sub", [sq, g.op("Mul", [dots, g.f32(2.0)])], hint=f"{label}{k}_dist")
        idx = g.op("ArgMin", [d], axis=1, keepdims=0, hint=f"{label}{k}_code")
        codes.append(idx)
        if k + 1 < n:
            q = g.op("Gather", [g.init(f"{label}{k}_e", e), idx], axis=0)
            x = g.op("Sub", [x, q], hint=f"{label}{k}_residual")
    return codes


def build_speech_encoder_graph(
    c: SpeechEncoderConfig, get: Callable[[str], np.ndarray], opset: int = 17
) -> onnx.ModelProto:
    """The encoder graph; `get(name)` returns a checkpoint tensor as float32."""
    for name, shape in encoder_tensor_shapes(c).items():
        got = tuple(get(name).shape)
        if got != shape:
            raise ValueError(f"{name}: shape {list(got)}, expected {list(shape)}")
    g = GraphBuilder()
    x = g.op("Reshape", ["audio", g.i64([1, 1, -1])], hint="audio_1x1")
    x = _seanet(g, c, x, get)  # [1, H, T']
    x = _transformer(g, c, g.op("Transpose", [x], perm=[0, 2, 1]), get)
    x = g.op("Transpose", [x], perm=[0, 2, 1], hint="tf_out")
    if c.downsample_kernel:
        w = get(_P + "downsample.conv.weight")
        x = _conv(g, x, w, None, "downsample", stride=2, mode="edge")
    x = g.op("Transpose", [x], perm=[0, 2, 1], hint="latent")
    x = g.op("Squeeze", [x, g.i64([0])], hint="frames")  # [F, H]
    codes = []
    for i, (prefix, n) in enumerate(_quantizers(c)):
        codes += _rvq(g, c, x, get, prefix, n, f"rvq{i}_")
    cols = [g.op("Unsqueeze", [k, g.i64([1])]) for k in codes]
    g.op("Concat", cols, axis=1, outputs=["codes"])
    graph = helper.make_graph(
        g.nodes,
        "qwen3_speech_encoder",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["samples"])],
        [helper.make_tensor_value_info("codes", TensorProto.INT64, ["frames", c.num_quantizers])],
        initializer=g.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="codecspec"
    )
    model.ir_version = 8
    meta = {"version": ENCODER_GRAPH_VERSION, "config": json.loads(c.to_json())}
    helper.set_model_props(model, {_META: json.dumps(meta, sort_keys=True)})
    return model
