"""What `codecspec bench` prints: each figure next to the lowest time physics allows.

On a CPU a decode step is memory-bound: a graph call streams its weights from memory once, so
no call can finish faster than (bytes of weights it reads) ÷ (this machine's streaming read
bandwidth). This module measures the bandwidth in the same run as the figures it bounds
(`stream_bandwidth`), counts the bytes each stage reads per frame (`graph_reads`,
`depth_loop_bytes`, `per_frame_bytes`) and prints one short table per bench (`render_table`).

The bench record (one dict; every family's bench fills it; a figure that does not exist for a
family is None, a stage it lacks is simply absent):

    family            str    "v3", "v2", "reference", "fsq", "qwen3", ...
    model             str    the model folder
    provider          str    onnxruntime execution provider
    threads           int    intra-op threads
    weights           str    the weights as the graphs read them at run time, e.g.
                             "fp32 (stored fp16)", "int8", "int4"
    bandwidth_gbps    float  stream_bandwidth(...) of this run, in GB/s (1e9 bytes/s)
    stages            list of dicts, one per row of the table:
        name          str    e.g. "temporal step", "depth loop", "vocoder", "host"
        ar_ms         float  ms per frame, autoregressive
        spec_ms       float  ms per frame, speculative (None: the family has no spec mode)
        bytes_ar      int    bytes of weights read per frame, AR
        bytes_spec    int    bytes of weights read per frame, speculative
        bound_ms_ar   float  bytes_ar ÷ bandwidth, in ms per frame
        bound_ms_spec float  bytes_spec ÷ bandwidth
        in_total      bool   optional, default True; False for a row measured apart from the
                             pipeline (e.g. the depth loop alone), left out of the totals
        spec_is_ar    bool   optional: the speculative side ran this stage AR (calibration
                             chose AR for it); printed as "(AR in both)"
        note          str    optional, printed under the table (e.g. "compute-bound")
    ms_per_frame          {ar, spec}  everything a user waits for, per frame
    bound_ms_per_frame    {ar, spec}  the sum of the in-total stages' bounds
    pipeline_rtf          {ar, spec}  ms_per_frame ÷ audio_ms_per_frame
    depth_speedup     float  depth loop AR ms ÷ speculative ms (speculation forced on)
    tokens_per_call   float  depth codes per speculative depth-graph call
    audio_ms_per_frame float ms of audio one frame carries
    peak_rss_mb       float  peak resident memory of the process (MiB) while the model was
                             loaded and run, before the bandwidth probe (whose buffer would
                             otherwise be the peak); where the OS lets the count restart
                             (Linux), a first run's graph build is not counted
    calibration       dict   optional: what the model's calibration chose per loop,
                             {"depth": "spec"|"ar", "temporal": "spec"|"ar"}
    ttfa_s            float  optional: seconds from a warm streamed request to its first audio
                             chunk (median of a few; families that stream)
    ttfa_cold_prefix_s float optional: the same for a voice's first request (Qwen3-TTS: the
                             talker's prompt-prefix cache emptied before each run)
    text_stream       dict   optional: a text fed at an LLM's pace (Qwen3-TTS: 30 tokens/s):
                             first_audio_ms after its first token, underruns and late_ms of
                             the audio played from its first chunk on, tokens_per_second
    cpu_simd          list   optional: the CPU's SIMD flags (kernel ratios differ by them)
    pipeline_end_to_end dict optional: text -> waveform run whole, AR and speculative at a
                             controlled acceptance ({acceptance, frames, ar_ms, spec_ms,
                             speedup, codes_equal_ar}), beside the stage-by-stage figures
    draft_depth_choice dict optional (Qwen3-TTS with a controlled acceptance): the chain
                             used, {depth, by: "auto"|"asked", predicted_speedup per chain,
                             call_ratio per verify-call size}
    temporal_speedup, temporal_tokens_per_call   optional (families that speculate in the
                             temporal loop): added to the verdict
    verdict           str    one line (`verdict(record)`)

`finish_record` fills the bounds, totals, RTF and verdict from the stages; `render_table`
tolerates missing stages, missing keys and None anywhere.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

__all__ = [
    "GraphReads",
    "bound_ms",
    "depth_loop_bytes",
    "finish_record",
    "graph_reads",
    "head_bank_bytes",
    "peak_rss_mb",
    "reset_peak_rss",
    "per_frame_bytes",
    "render_table",
    "stage",
    "stream_bandwidth",
    "tensor_nbytes",
    "verdict",
]


# ---------------------------------------------------------------------------- the machine
def stream_bandwidth(seconds: float = 0.3, *, threads: int = 1, buffer_mb: int = 256) -> float:
    """This machine's streaming read bandwidth in bytes/s, measured now.

    The estimator: `numpy.sum` over a float32 buffer of `buffer_mb` MiB, split over `threads`
    threads (numpy releases the GIL inside the reduction), best of repeated passes for
    `seconds` (at least three passes). A sum reads every byte once and writes nothing (a
    copy would also write, and a write first reads its line: three transfers per byte), and
    its vector adds are far cheaper than its loads, so a pass takes bytes ÷ bandwidth. Load
    from other processes only adds time, so the fastest pass is the closest to what the
    memory system gives. Use the thread count of the sessions being bounded: one core cannot
    saturate the memory controllers (2-core VM: 7.4 GB/s on one thread, 13.2 on two).

    256 MiB: on the 2-core VM this was written on (which reports a 300 MiB L3 shared with
    other tenants) buffers of 64 MiB to 1 GiB all read at the same rate, i.e. from DRAM;
    allocating and touching the buffer costs ~0.3 s of the run's time."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected an int >= 1, got {threads!r}")
    if isinstance(buffer_mb, bool) or not isinstance(buffer_mb, int) or buffer_mb < 1:
        raise ValueError(f"buffer_mb: expected an int >= 1, got {buffer_mb!r}")
    if isinstance(seconds, bool) or not (isinstance(seconds, (int, float)) and 0 < seconds <= 60):
        raise ValueError(f"seconds: expected a number in (0, 60], got {seconds!r}")
    buf = np.ones(buffer_mb * (1 << 20) // 4, np.float32)  # written, hence resident
    parts = np.array_split(buf, threads)
    best = math.inf
    if threads == 1:

        def one_pass():
            buf.sum()

    else:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(threads)

        def one_pass():
            for f in [pool.submit(p.sum) for p in parts]:
                f.result()

    try:
        deadline = time.perf_counter() + seconds
        passes = 0
        while passes < 3 or time.perf_counter() < deadline:
            t0 = time.perf_counter()
            one_pass()
            best = min(best, time.perf_counter() - t0)
            passes += 1
    finally:
        if threads > 1:
            pool.shutdown()
    return buf.nbytes / best


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (ru_maxrss: KiB on Linux, bytes
    on macOS)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


def reset_peak_rss() -> bool:
    """Restart this process's peak-resident-memory count at what it holds now, so that
    `peak_rss_mb` covers what runs after (a one-off graph build before a bench, whose fp32
    intermediates can be several times the running model, is not what a user's process holds
    afterwards). Linux only (writing 5 to /proc/self/clear_refs resets the high-water mark,
    which getrusage reads); False where the OS does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def bound_ms(nbytes, bandwidth) -> Optional[float]:
    """The lowest possible ms to read `nbytes` at `bandwidth` bytes/s (None if either is)."""
    if nbytes is None or bandwidth is None:
        return None
    if not (bandwidth > 0 and math.isfinite(bandwidth)):
        raise ValueError(f"bandwidth: expected a positive finite bytes/s, got {bandwidth!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes: expected >= 0, got {nbytes!r}")
    return 1e3 * float(nbytes) / float(bandwidth)


# ---------------------------------------------------------------------------- bytes read
_SUB_BYTE_BITS = {21: 4, 22: 4, 23: 4}  # UINT4, INT4, FLOAT4E2M1


def tensor_nbytes(dims, data_type: int) -> int:
    """Bytes of a tensor of these dims and ONNX data type (4-bit types packed two a byte;
    strings and unknown types 0)."""
    from onnx import helper

    n = int(np.prod(dims, dtype=np.int64)) if len(dims) else 1
    if data_type in _SUB_BYTE_BITS:
        return (n * _SUB_BYTE_BITS[data_type] + 7) // 8
    try:
        return n * np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except (KeyError, TypeError, ValueError):  # strings and unknown types: not weights
        return 0


def _dtype_name(data_type: int) -> str:
    from onnx import TensorProto

    names = {1: "fp32", 10: "fp16", 16: "bf16", 11: "fp64", 3: "int8", 2: "uint8", 22: "int4"}
    return names.get(data_type, TensorProto.DataType.Name(data_type).lower())


@dataclass(frozen=True)
class GraphReads:
    """Bytes of weights one call of a graph reads.

    streamed: tensors read whole every call (matmul weights, norms, biases, quantised
    blobs and their scales). per_row: bytes per query token, summed over the tables read
    only by row lookups (an embedding table, a RoPE cache: a call with q query tokens reads
    q rows of each, not the table). tables: those tables' full size (resident, not streamed).
    dtypes: streamed bytes per dtype as the graph computes with them; stored: the same
    tensors' bytes per dtype in the file."""

    streamed: int
    per_row: int
    tables: int
    dtypes: dict = field(default_factory=dict)
    stored: dict = field(default_factory=dict)  # streamed bytes per dtype as stored

    def per_call(self, rows: int = 1) -> int:
        """Bytes one call with `rows` query tokens (gathered rows) reads."""
        return self.streamed + int(rows) * self.per_row

    @property
    def weights(self) -> str:
        """The dominant dtype of the streamed weights as read, e.g. "fp32", and as stored
        where that differs: "fp32 (stored fp16)"."""
        if not self.dtypes:
            return "none"
        read = max(self.dtypes.items(), key=lambda kv: kv[1])[0]
        stored = max(self.stored.items(), key=lambda kv: kv[1])[0] if self.stored else read
        return read if stored == read else f"{read} (stored {stored})"


def _load_graph(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(model))
        except Exception as e:  # a protobuf error: not a model
            raise ValueError(f"model: not an ONNX model ({e})") from None
    path = Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"model: no such ONNX file: {model}")
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as e:  # a protobuf error: not a model
        raise ValueError(f"model: {path} is not an ONNX model ({e})") from None


def _graphs(graph):
    """The graph and its subgraphs (If/Loop/Scan bodies)."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


# (op, input) pairs that read a weight one row per query token: embedding lookups, and the
# RoPE cos/sin caches that onnxruntime's fused kernels index by position.
_ROW_LOOKUPS = {
    ("Gather", 0),
    ("RotaryEmbedding", 2),
    ("RotaryEmbedding", 3),
    ("GroupQueryAttention", 7),
    ("GroupQueryAttention", 8),
}


def _row_lookup(node, index: int) -> bool:
    """Whether input `index` of `node` is read one row per query token (Gather: axis 0)."""
    if (node.op_type, index) not in _ROW_LOOKUPS:
        return False
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return node.op_type != "Gather" or axis == 0


def graph_reads(model) -> GraphReads:
    """Bytes of weights (initializers and Constant tensors of any numeric type) one call of
    `model` (a path, serialized bytes or an onnx.ModelProto) reads, as onnxruntime runs it.

    Two rules follow what onnxruntime does at session creation and at run time:
    - a weight consumed through Cast (fp16 stored, fp32 computed) is folded to the Cast's
      type when the session is created, so it is counted at that type;
    - a weight read only by row lookups (the data of Gather on axis 0, the cos/sin caches
      of RotaryEmbedding and GroupQueryAttention) is a table: a call reads one row per
      query token, counted in `per_row`, not the table.
    Quantised weights count their real bytes: MatMulNBits' uint8 blobs plus scales (and
    zero points), MatMulInteger's int8 weights plus scale and zero point."""
    m = _load_graph(model)
    consumers: dict = {}
    tensors = []  # (name, dims, data_type)
    for g in _graphs(m.graph):
        for t in g.initializer:
            tensors.append((t.name, list(t.dims), t.data_type))
        for node in g.node:
            for i, x in enumerate(node.input):
                consumers.setdefault(x, []).append((node, i))
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        tensors.append((node.output[0], list(a.t.dims), a.t.data_type))

    def leaves(name: str, dtype: int, seen=()):
        """(node, input index, dtype as consumed) of every consumer past the Casts."""
        for node, i in consumers.get(name, []):
            if node.op_type == "Cast" and node.output[0] not in seen:
                to = next(a.i for a in node.attribute if a.name == "to")
                yield from leaves(node.output[0], to, seen + (node.output[0],))
            else:
                yield node, i, dtype

    streamed = per_row = tables = 0
    dtypes: dict = {}
    stored: dict = {}
    for name, dims, dt in tensors:
        uses = list(leaves(name, dt))
        if not uses:
            continue  # a graph output or dead weight: never read by a kernel
        eff = {d for _, _, d in uses}
        eff_dt = max(eff, key=lambda d: tensor_nbytes(dims, d))
        nbytes = tensor_nbytes(dims, eff_dt)
        gathered = len(dims) >= 1 and all(_row_lookup(node, i) for node, i, _ in uses)
        if gathered and dims[0] > 0:
            per_row += nbytes // int(dims[0])
            tables += nbytes
        else:
            streamed += nbytes
            key = _dtype_name(eff_dt)
            dtypes[key] = dtypes.get(key, 0) + nbytes
            key = _dtype_name(dt)
            stored[key] = stored.get(key, 0) + tensor_nbytes(dims, dt)
    return GraphReads(streamed, per_row, tables, dtypes, stored)


def per_frame_bytes(reads: Iterable) -> int:
    """Bytes per frame from (bytes per call, calls per frame) pairs."""
    total = 0.0
    for nbytes, calls in reads:
        if nbytes < 0 or calls < 0:
            raise ValueError(f"reads: bytes and calls must be >= 0, got ({nbytes}, {calls})")
        total += float(nbytes) * float(calls)
    return int(round(total))


def head_bank_bytes(num_heads: int, vocab: int, hidden: int, targets_bf16: bool) -> tuple:
    """(bytes one target head read costs, bytes one draft head read costs) of a host-side
    HeadBank: targets are f32 unless every weight is exactly bf16, drafts are always bf16."""
    per = int(vocab) * int(hidden)
    return (per * (2 if targets_bf16 else 4), per * 2)


def depth_loop_bytes(
    graph: GraphReads,
    codebooks: int,
    spec_calls_per_frame: Optional[float],
    *,
    tree_nodes: int,
    tree_depth: int,
    head_bytes: tuple = (0, 0),
) -> dict:
    """Bytes the depth loop reads per frame, {"ar": ..., "spec": ...}.

    AR: a prefill call (2 rows) and G-2 one-row steps, each streaming the graph's weights,
    and one target head per sampled code (G-1). Speculative: the prefill and then
    `spec_calls_per_frame` - 1 tree calls of `tree_nodes` rows; each tree call's verification
    reads the target heads of the tree's tree_depth + 1 levels, and the prefill and every
    tree call but the last draft `tree_depth` candidates through the bf16 draft heads.
    `head_bytes`: head_bank_bytes(...), (0, 0) when the heads are in the graph (its Gather
    of one head per row is then in graph.per_row)."""
    g = int(codebooks)
    target, draft = head_bytes
    ar = per_frame_bytes(
        [
            (graph.per_call(2), 1),
            (graph.per_call(1), g - 2),
            (target, g - 1),
        ]
    )
    if spec_calls_per_frame is None:
        return {"ar": ar, "spec": None}
    tree_calls = max(float(spec_calls_per_frame) - 1.0, 0.0)
    spec = per_frame_bytes(
        [
            (graph.per_call(2), 1),
            (graph.per_call(tree_nodes), tree_calls),
            (target, 1 + tree_calls * (tree_depth + 1)),
            (draft * tree_depth, max(tree_calls, 1.0)),
        ]
    )
    return {"ar": ar, "spec": spec}


# ---------------------------------------------------------------------------- the record
def stage(name: str, ar_ms, spec_ms, bytes_ar, bytes_spec, **extra) -> dict:
    """One row of the record's `stages` (bounds are filled by finish_record)."""
    row = {
        "name": name,
        "ar_ms": None if ar_ms is None else float(ar_ms),
        "spec_ms": None if spec_ms is None else float(spec_ms),
        "bytes_ar": None if bytes_ar is None else int(bytes_ar),
        "bytes_spec": None if bytes_spec is None else int(bytes_spec),
    }
    row.update(extra)
    return row


def _sum(values) -> Optional[float]:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return float(sum(values))


def _ratio(a, b) -> Optional[float]:
    if a is None or b is None or not b > 0:
        return None
    return float(a) / float(b)


def finish_record(record: dict) -> dict:
    """Fills each stage's bounds and bound_ms_per_frame, then (unless the record has them)
    ms_per_frame as the sum of the in-total stages, pipeline_rtf as ms_per_frame ÷
    audio_ms_per_frame, and the verdict. Returns the record."""
    bw = record.get("bandwidth_gbps")
    bandwidth = None if bw is None else 1e9 * float(bw)
    stages = record.setdefault("stages", [])
    for s in stages:
        for m in ("ar", "spec"):
            s[f"bound_ms_{m}"] = bound_ms(s.get(f"bytes_{m}"), bandwidth)
    total = [s for s in stages if s.get("in_total", True)]
    modes = ("ar", "spec")
    record["bound_ms_per_frame"] = {
        m: _sum(s.get(f"bound_ms_{m}") for s in total) if total else None for m in modes
    }
    if "ms_per_frame" not in record:  # a measured total wins over the sum of its stages
        record["ms_per_frame"] = {m: _sum(s.get(f"{m}_ms") for s in total) for m in modes}
    if "pipeline_rtf" not in record:  # None where no pipeline ran: no RTF to state
        ms, audio = record["ms_per_frame"] or {}, record.get("audio_ms_per_frame")
        record["pipeline_rtf"] = {m: _ratio(ms.get(m), audio) for m in modes}
    if not record.get("verdict"):
        record["verdict"] = verdict(record)
    return record


def verdict(record: dict) -> str:
    """One line from the figures: does speculation pay here, and what calibration chose."""
    ms = record.get("ms_per_frame") or {}
    d = record.get("depth_speedup")
    tpc = record.get("tokens_per_call")
    chose = (record.get("calibration") or {}).get("depth")
    at = f" at {tpc:.2f} tokens per call" if tpc is not None else ""
    if d is None:
        ar, sp = ms.get("ar"), ms.get("spec")
        if sp is None:
            rtf = (record.get("pipeline_rtf") or {}).get("ar")
            tail = f", RTF {rtf:.2f}" if rtf is not None else ""
            return f"one graph call per frame: nothing to speculate{tail}"
        d = _ratio(ar, sp)
        if d is None:
            return "no verdict: a figure is missing"
    if d > 1.0:
        line = f"speculation pays {d:.2f}× here{at}"
        if chose == "ar":
            line += "; calibration chose AR on its machine: recalibrate here (codecspec calibrate)"
        elif chose == "spec":
            line += ": calibration chose spec"
    else:
        line = f"AR is faster on this device (speculation {d:.2f}×{at})"
        if chose == "ar":
            line += ": calibration chose AR"
        elif chose == "spec":
            line += "; calibration chose spec on its machine: recalibrate here"
    temporal = record.get("temporal_speedup")
    if temporal is not None:
        ttpc = record.get("temporal_tokens_per_call")
        tat = f" at {ttpc:.2f} c0 per call" if ttpc is not None else ""
        line += f"; temporal speculation {temporal:.2f}×{tat}"
        total = _ratio(ms.get("ar"), ms.get("spec"))
        if total is not None:
            line += f", the whole pipeline {total:.2f}×"
    return line


# ---------------------------------------------------------------------------- the table
def _f(x, fmt: str = "{:.2f}", none: str = "–") -> str:
    return none if x is None else fmt.format(x)


def _num(x) -> str:
    """3 significant digits, no exponent; "–" for None."""
    if x is None:
        return "–"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _bound(x) -> str:
    return "<0.001" if x is not None and 0 < x < 0.001 else _num(x)


def _over(x) -> str:
    """Measured ÷ bound; past 1000 the stage is not limited by its weights at all."""
    return ">1000" if x is not None and x > 1000 else _num(x)


def _pair(a, b, fmt=_num) -> str:
    """ "a/b", or one figure where both are the same or b does not exist."""
    if b is None or fmt(a) == fmt(b):
        return fmt(a)
    if a is None:
        return f"–/{fmt(b)}"
    return f"{fmt(a)}/{fmt(b)}"


def _bytes(n) -> str:
    if n is None:
        return "–"
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.0f} kB" if n >= 1e3 else f"{n:.0f} B"


_COLUMNS = ["ms per frame", "AR", "spec", "speed-up", "weights read", "bound ms", "÷ bound"]


def _row(name, ar, sp, b_ar, b_sp, bo_ar, bo_sp) -> list:
    """One table row: measured ms, speed-up, bytes, bound, measured ÷ bound (AR/spec)."""
    over_ar, over_sp = _ratio(ar, bo_ar), _ratio(sp, bo_sp)
    return [
        name,
        _f(ar),
        _f(sp),
        _f(_ratio(ar, sp), "{:.2f}×"),
        "" if b_ar is None and b_sp is None else _pair(b_ar, b_sp, _bytes),
        "" if bo_ar is None and bo_sp is None else _pair(bo_ar, bo_sp, _bound),
        "" if over_ar is None and over_sp is None else _pair(over_ar, over_sp, _over),
    ]


def draft_depth_line(choice: dict, acceptance: float) -> str:
    """One line: the chain used, why, and every chain's predicted depth-loop speed-up."""
    pred = ", ".join(f"{d}: {x:.2f}x" for d, x in choice["predicted_speedup"].items())
    ratio = " / ".join(f"{r:.2f}" for r in choice["call_ratio"].values())
    how = "chosen here" if choice["by"] == "auto" else "asked"
    return (
        f"drafts per round: {choice['depth']} ({how}; predicted depth-loop speed-up at acceptance "
        f"{acceptance:g} per chain {pred}; a verify call of 2.. rows costs {ratio}x an AR call)"
    )


def render_table(record: dict) -> str:
    """The bench as a person reads it: a row per stage (ms per frame AR and speculative,
    speed-up, weight bytes read per frame, the bandwidth bound, measured ÷ bound; a/b =
    AR/spec), the totals, RTF, and the verdict."""
    r = record
    rss, threads = r.get("peak_rss_mb"), r.get("threads")
    threads = "default threads" if not threads else f"{threads} thread" + "s" * (threads != 1)
    head = [
        f"{r.get('family') or '?'} · {r.get('model') or '?'}",
        f"{r.get('provider') or '?'}, {threads}, weights "
        f"{r.get('weights') or '?'}, streaming bandwidth {_f(r.get('bandwidth_gbps'), '{:.1f}')}"
        f" GB/s (measured in this run)" + ("" if rss is None else f", peak RSS {rss:.0f} MiB"),
    ]
    rows, notes = [], []
    stages = r.get("stages") or []
    for s in stages:
        name = str(s.get("name", "?"))
        name += " (AR in both)" if s.get("spec_is_ar") else ""
        name += "" if s.get("in_total", True) else " *"
        keys = ("ar_ms", "spec_ms", "bytes_ar", "bytes_spec", "bound_ms_ar", "bound_ms_spec")
        rows.append(_row(name, *(s.get(k) for k in keys)))
        if s.get("note"):
            notes.append(f"{s.get('name')}: {s['note']}")
    ms, bound = r.get("ms_per_frame") or {}, r.get("bound_ms_per_frame") or {}
    total = _row(
        "total", ms.get("ar"), ms.get("spec"), None, None, bound.get("ar"), bound.get("spec")
    )
    rtf = r.get("pipeline_rtf") or {}
    rows += [total, ["RTF", _f(rtf.get("ar"), "{:.3f}"), _f(rtf.get("spec"), "{:.3f}")] + [""] * 4]
    widths = [max(len(x[i]) for x in [_COLUMNS] + rows) for i in range(len(_COLUMNS))]

    def line(cells):
        cells = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "  ".join(cells).rstrip()

    out = head + ["", line(_COLUMNS)] + [line(x) for x in rows]
    foot = "bound = weight bytes read per frame ÷ streaming bandwidth (a/b: AR/spec)"
    audio = r.get("audio_ms_per_frame")
    if audio is not None:
        foot += f"; RTF = ms per frame ÷ {audio:.0f} ms of audio per frame"
    out += ["", foot]
    e2e = r.get("pipeline_end_to_end")
    if e2e:
        out.append(
            f"whole pipeline run end to end at acceptance {e2e['acceptance']:g} "
            f"({e2e['frames']} frames): AR {e2e['ar_ms']:.1f}, speculative "
            f"{e2e['spec_ms']:.1f} ms per frame ({e2e['speedup']:.2f}x)"
        )
    choice = r.get("draft_depth_choice")
    if choice and r.get("acceptance") is not None:
        out.append(draft_depth_line(choice, r["acceptance"]))
    if r.get("ttfa_s") is not None:
        line = f"time to first audio (streamed, warm): {r['ttfa_s']:.2f} s"
        if r.get("ttfa_cold_prefix_s") is not None:
            line += f" (a voice's first request: {r['ttfa_cold_prefix_s']:.2f} s)"
        out.append(line)
    ts = r.get("text_stream") or {}
    if ts.get("first_audio_ms") is not None:
        out.append(
            f"text at {ts['tokens_per_second']:g} tokens/s: first audio {ts['first_audio_ms']:.0f}"
            f" ms after its first token; {ts['underruns']} of {ts['chunks']} chunks late"
            f" (by up to {ts['late_ms']:.0f} ms)"
        )
    err = r.get("decoder_error")
    if err:
        out.append(
            f"speech decoder {r['decoder_precision']} against fp32 (measured at its build): "
            f"{err['snr_db']:.1f} dB SNR, {err['log_spectral_distance_db']:.2f} dB log-spectral"
        )
    if r.get("cpu_simd"):
        out.append("CPU: " + " ".join(r["cpu_simd"]))
    chosen = (r.get("calibration") or {}).get("precision")
    if chosen:
        out.append(f"weights calibration chose here: {chosen}")
    if any(not s.get("in_total", True) for s in stages):
        out.append("* measured on its own (speculation on), not part of the total")
    out += notes
    out.append(f"verdict: {r.get('verdict') or verdict(r)}")
    return "\n".join(out)
