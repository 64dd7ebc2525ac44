"""The 12 Hz decoder with its upsampler's residual units in int8 (opt-in; issue 53).

Where the float32 decoder's time goes on a CPU: ~55% in the convolutions of the upsampler's
residual units (k = 7 dilated and 1x1 convolutions over 96-768 channels at 0.3-24 kHz), which
are compute bound at the streamed chunk sizes. Run as onnxruntime's QLinearConv (uint8
activations, int8 weights per output channel; VNNI where the CPU has it) they take about a
quarter of that time. Everything else stays float32: the transposed convolutions (their
weights would be dequantised on every call), the pre-convolution, the ConvNeXt and input
convolutions and the output convolution (quantising those five as well cost 12 dB of SNR
and saved nothing measurable), SnakeBeta, the transformer.

The graph is written beside the cached float32 one (`decoder[.fused].int8.onnx`): the int8
weights inline, every other tensor read from the same `decoder.onnx.data`. Activation ranges
are calibrated once, on the float32 graph itself decoding seeded random codes in the calls
`decode()` makes (uniform codes drive it about as hard as a talker's own codes did here; a real
checkpoint's speech could not be tried: docs/qwen3_tts_decoder.md). Its error
against float32 on other random codes is measured at build and kept beside it
(`decoder[.fused].int8.json`: waveform SNR and log-spectral distance), so every load can say
what the option costs. The codes never pass through here: served codes are unchanged.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

DECODER_INT8_VERSION = 1
PRECISIONS = ("fp32", "int8")
# the residual units' convolutions (decoder_graph names them b{block}_ru{unit}_conv{1,2})
_QUANTISED = re.compile(r"b\d+_ru\d+_conv[12]$")
_CALIBRATION_SEED, _CHECK_SEED, _CALIBRATION_FRAMES = 1234, 4321, 40


def check_precision(precision) -> str:
    """`precision` ("fp32", "int8" or None = fp32); a ValueError naming decoder_precision."""
    if precision is None:
        return "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"decoder_precision: expected one of {PRECISIONS}, got {precision!r}")
    return precision


def int8_graph(src: Path, float32) -> Path:
    """The int8 twin of the cached float32 graph `src`, built beside it on first use and
    reused after; its measured error in the `.json` beside it. `float32()`: a SpeechDecoder
    on `src` (CPU provider), opened only for a build."""
    path = src.with_name(f"{src.stem}.int8.onnx")
    report = path.with_suffix(".json")
    if path.is_file() and _current(report):
        return path
    import onnx

    decoder = float32()

    model = onnx.load(str(src), load_external_data=False)
    convs = [n for n in model.graph.node if n.op_type == "Conv" and _QUANTISED.search(n.name)]
    if not convs:
        raise ValueError(f"decoder_precision: {src} has no residual-unit convolution to quantise")
    names = sorted({t for n in convs for t in (n.input[0], n.output[0])})
    ranges = _calibrate(decoder, model, names)
    _replace(model, {n.name: _quantise_conv(model, n, ranges, src.parent) for n in convs})
    _write(model, path)
    _write_report(decoder, path, report, len(convs))
    return path


def _current(report: Path) -> bool:
    try:
        return json.loads(report.read_text()).get("version") == DECODER_INT8_VERSION
    except (OSError, ValueError):
        return False


def _write(model, path: Path) -> None:
    import onnx

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def calibration_codes(decoder, seed: int, frames: int = _CALIBRATION_FRAMES) -> np.ndarray:
    """Seeded uniform codes [frames, num_quantizers] for the decoder's calibration and check."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, decoder.codebook_size, (frames, decoder.num_quantizers))


class _Recorder:
    """A session stand-in: runs the graph with `extra` outputs added, keeps their ranges."""

    def __init__(self, session, extra: list) -> None:
        self.session, self.extra = session, extra
        self.low = dict.fromkeys(extra, 0.0)
        self.high = dict.fromkeys(extra, 0.0)

    def get_inputs(self):
        return self.session.get_inputs()

    def run(self, names, feeds):
        out = self.session.run(list(names) + self.extra, feeds)
        for name, v in zip(self.extra, out[len(names) :]):
            self.low[name] = min(self.low[name], float(v.min()))
            self.high[name] = max(self.high[name], float(v.max()))
        return out[: len(names)]


def _calibrate(decoder, model, names: list) -> dict:
    """{tensor: (low, high)} over `decode()` of two seeded code sequences, each range
    widened to hold 0 (uint8 with a zero point represents 0 exactly)."""
    import onnx

    from codecspec.runtime.session import open_session

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(
        onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names
    )
    src = Path(decoder.graph_path)
    tmp = src.with_name(f"{src.stem}.calibration.{os.getpid()}.onnx")  # beside its weights file
    try:
        onnx.save(probe, str(tmp))
        s = decoder.source
        session = open_session(tmp, "cpu", s.threads, arena=False, custom_ops=s.fused)
    finally:
        tmp.unlink(missing_ok=True)
    recorder = _Recorder(session, names)
    probe_decoder = type(decoder)(recorder, decoder.config, src)  # decoder.py's SpeechDecoder
    for seed in (_CALIBRATION_SEED, _CALIBRATION_SEED + 1):
        probe_decoder.decode(calibration_codes(decoder, seed))
    return {n: (recorder.low[n], recorder.high[n]) for n in names}


def _uint8(low: float, high: float) -> tuple[np.float32, np.uint8]:
    scale = max(high - low, 1e-8) / 255.0
    return np.float32(scale), np.uint8(np.clip(round(-low / scale), 0, 255))


def _quantise_conv(model, node, ranges: dict, base: Path) -> tuple[list, list]:
    """The nodes and initializers standing for `node`: DQ(x) * DQ(w) + DQ(b) -> Q(y) -> DQ,
    the pattern onnxruntime runs as one QLinearConv (the float weights are left unread)."""
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    w = numpy_helper.to_array(inits[node.input[1]], base_dir=str(base)).astype(np.float32)
    w_scale = (np.abs(w).reshape(len(w), -1).max(axis=1) / 127.0).astype(np.float32)
    w_scale = np.maximum(w_scale, np.float32(1e-12))
    wq = np.clip(np.round(w / w_scale[:, None, None]), -127, 127).astype(np.int8)
    x, y = node.input[0], node.output[0]
    x_scale, x_zero = _uint8(*ranges[x])
    y_scale, y_zero = _uint8(*ranges[y])
    p = node.name + "_int8"
    new = [
        numpy_helper.from_array(wq, p + "_w"),
        numpy_helper.from_array(w_scale, p + "_w_scale"),
        numpy_helper.from_array(np.zeros(len(w), np.int8), p + "_w_zero"),
        numpy_helper.from_array(np.array(x_scale), p + "_x_scale"),
        numpy_helper.from_array(np.array(x_zero), p + "_x_zero"),
        numpy_helper.from_array(np.array(y_scale), p + "_y_scale"),
        numpy_helper.from_array(np.array(y_zero), p + "_y_zero"),
    ]
    nodes = [
        _linear("QuantizeLinear", x, p + "_x", p + "_xq"),
        _linear("DequantizeLinear", p + "_xq", p + "_x", p + "_x"),
        _linear("DequantizeLinear", p + "_w", p + "_w", p + "_wf", axis=0),
    ]
    inputs = [p + "_x", p + "_wf"]
    if len(node.input) > 2 and node.input[2]:
        b = numpy_helper.to_array(inits[node.input[2]], base_dir=str(base))
        b_scale = (w_scale * x_scale).astype(np.float32)
        new += [
            numpy_helper.from_array(np.round(b / b_scale).astype(np.int32), p + "_b"),
            numpy_helper.from_array(b_scale, p + "_b_scale"),
            numpy_helper.from_array(np.zeros(len(w), np.int32), p + "_b_zero"),
        ]
        nodes.append(_linear("DequantizeLinear", p + "_b", p + "_b", p + "_bf", axis=0))
        inputs.append(p + "_bf")
    conv = helper.make_node("Conv", inputs, [p + "_y"], name=node.name)
    conv.attribute.extend(node.attribute)
    nodes += [
        conv,
        _linear("QuantizeLinear", p + "_y", p + "_y", p + "_yq"),
        _linear("DequantizeLinear", p + "_yq", p + "_y", y),
    ]
    return nodes, new


def _linear(op: str, value: str, params: str, out: str, **attrs):
    """A QuantizeLinear / DequantizeLinear node of `value` with `params`_scale / _zero."""
    from onnx import helper

    return helper.make_node(op, [value, params + "_scale", params + "_zero"], [out], **attrs)


def _replace(model, by_name: dict) -> None:
    """Each node named in `by_name` replaced by its (nodes, initializers); initializers no
    node reads any more dropped."""
    graph = model.graph
    nodes, inits = [], []
    for n in graph.node:
        new_nodes, new_inits = by_name.get(n.name, ([n], []))
        nodes += new_nodes
        inits += new_inits
    read = {t for n in nodes for t in n.input}
    inits = [t for t in graph.initializer if t.name in read] + inits
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(inits)


def _write_report(decoder, path: Path, report: Path, convs: int) -> None:
    """The int8 graph's error against float32 on codes it was not calibrated on."""
    from codecspec.codec.features import log_spectral_distance
    from codecspec.runtime.session import open_session

    s = decoder.source
    twin = type(decoder)(
        open_session(path, "cpu", s.threads, arena=False, custom_ops=s.fused),
        decoder.config,
        path,
    )
    codes = calibration_codes(decoder, _CHECK_SEED)
    ref, out = decoder.decode(codes), twin.decode(codes)
    error = error_figures(ref, out)
    error["log_spectral_distance_db"] = round(log_spectral_distance(ref, out), 3)
    tmp = report.with_name(f"{report.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"version": DECODER_INT8_VERSION, "convolutions": convs, **error}))
    os.replace(tmp, report)


def error_figures(ref: np.ndarray, out: np.ndarray) -> dict:
    """Waveform SNR (dB) and largest sample difference of `out` against `ref`."""
    ref = np.asarray(ref, np.float64).reshape(-1)
    diff = np.asarray(out, np.float64).reshape(-1) - ref
    snr = 10 * np.log10(np.sum(ref**2) / max(np.sum(diff**2), 1e-30))
    return {"snr_db": round(float(snr), 2), "max_abs": float(np.abs(diff).max())}


def int8_error(path: Path) -> dict:
    """What the build measured for the int8 graph at `path` (int8_graph's report)."""
    return json.loads(Path(path).with_suffix(".json").read_text())
