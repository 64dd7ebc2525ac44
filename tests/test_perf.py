"""codecspec.perf: the measured bandwidth, the weight bytes a graph call reads, the bench
record's bounds and verdict, its table, and `codecspec bench` printing them."""

from __future__ import annotations

import json
import math
import mmap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from codecspec import perf
from codecspec.perf import GraphReads

RNG = np.random.default_rng(0)


def _model(nodes, inits, x=("x", [1, 64]), y=("y", [1, 32])):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(x[0], TensorProto.FLOAT, x[1])],
        [helper.make_tensor_value_info(y[0], TensorProto.FLOAT, y[1])],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _mlp():
    inits = {
        "w1": RNG.standard_normal((64, 128)).astype(np.float32),
        "b1": RNG.standard_normal(128).astype(np.float32),
        "w2": RNG.standard_normal((128, 32)).astype(np.float32),
        "shape": np.array([1, 32], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Reshape", ["o", "shape"], ["y"]),
    ]
    return _model(nodes, inits), inits


# ---------------------------------------------------------------------------- the machine
def test_stream_bandwidth_is_a_positive_finite_rate():
    for threads in (1, 2):
        bw = perf.stream_bandwidth(0.05, threads=threads, buffer_mb=32)
        assert math.isfinite(bw) and bw > 1e8, bw  # any machine streams > 100 MB/s


@pytest.mark.parametrize(
    "kw, arg",
    [({"threads": 0}, "threads"), ({"buffer_mb": 0}, "buffer_mb"), ({"seconds": -1}, "seconds")],
)
def test_stream_bandwidth_refuses_bad_arguments(kw, arg):
    with pytest.raises(ValueError, match=arg):
        perf.stream_bandwidth(**kw)


def test_peak_rss_and_bound():
    assert 10 < perf.peak_rss_mb() < 1e6
    assert perf.bound_ms(2e9, 1e9) == pytest.approx(2000.0)
    assert perf.bound_ms(None, 1e9) is None
    with pytest.raises(ValueError, match="bandwidth"):
        perf.bound_ms(1, 0.0)


def test_reset_peak_rss_forgets_a_freed_peak():
    """A bench resets the count after its model's build: a peak that was freed before the
    reset must not be reported after it (the broken variant: no reset keeps it)."""
    # reset first, so the spike is this test's peak whatever earlier tests in the process
    # reached (a long run's earlier peak is above it, and its memory need not come back)
    if not perf.reset_peak_rss():
        pytest.skip("this OS cannot restart the peak-RSS count")
    # 256 MiB of our own anonymous mapping, every page touched: closing it returns it to the
    # OS whichever allocator the process runs (a caching malloc that a library of the full
    # suite loads kept a freed numpy array's pages, and the test failed inside full runs)
    spike = mmap.mmap(-1, 256 * 2**20)
    for i in range(0, len(spike), mmap.PAGESIZE):
        spike[i] = 1
    with_spike = perf.peak_rss_mb()
    spike.close()
    assert perf.peak_rss_mb() >= with_spike  # freeing alone does not lower a peak
    perf.reset_peak_rss()
    assert perf.peak_rss_mb() < with_spike - 128


# ---------------------------------------------------------------------------- bytes read
def test_graph_reads_of_a_small_graph_is_the_sum_of_its_initializers(tmp_path):
    m, inits = _mlp()
    want = sum(a.nbytes for a in inits.values())
    r = perf.graph_reads(m)
    assert r.streamed == want and r.per_row == 0 and r.tables == 0
    assert r.per_call(5) == want and r.weights == "fp32"
    path = tmp_path / "mlp.onnx"
    onnx.save(m, str(path))
    assert perf.graph_reads(path) == r
    assert perf.graph_reads(m.SerializeToString()) == r


def test_cast_weights_count_as_computed_and_tables_per_row():
    table = RNG.standard_normal((1000, 64)).astype(np.float16)
    w = RNG.standard_normal((64, 32)).astype(np.float16)
    nodes = [
        helper.make_node("Cast", ["table16"], ["table"], to=TensorProto.FLOAT),
        helper.make_node("Gather", ["table", "ids"], ["x"], axis=0),
        helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 32])],
        [numpy_helper.from_array(table, "table16"), numpy_helper.from_array(w, "w16")],
    )
    r = perf.graph_reads(helper.make_model(g))
    # onnxruntime folds Cast(fp16 weight) to an fp32 constant: 4 bytes per weight read
    assert r.streamed == w.size * 4 and r.weights == "fp32 (stored fp16)"
    assert r.per_row == 64 * 4 and r.tables == table.size * 4
    assert r.per_call(3) == w.size * 4 + 3 * 64 * 4
    # the same table read whole (a MatMul) is streamed, not gathered: the rule must tell
    nodes[1] = helper.make_node("MatMul", ["table", "w"], ["x"])
    g2 = helper.make_graph(nodes[:3], "g", g.input, g.output, g.initializer)
    assert perf.graph_reads(helper.make_model(g2)).streamed == (table.size + w.size) * 4


def test_matmulnbits_weights_count_their_real_bytes():
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    inits = {"w": RNG.standard_normal((256, 128)).astype(np.float32)}
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], inits, ("x", [1, 256]))
    fp32 = perf.graph_reads(m).streamed  # before: the quantiser rewrites m in place
    assert fp32 == inits["w"].nbytes
    q = MatMulNBitsQuantizer(m, block_size=32, is_symmetric=True)
    q.process()
    qm = q.model.model
    assert [n.op_type for n in qm.graph.node] == ["MatMulNBits"]
    int4 = perf.graph_reads(qm)
    real = sum(numpy_helper.to_array(t).nbytes for t in qm.graph.initializer)
    assert int4.streamed == real  # uint8 blobs + scales, as stored
    # 4 bits a weight plus an fp32 scale per block of 32: 1/8 + 1/32 of the fp32 bytes
    assert int4.streamed == fp32 // 8 + fp32 // 32


def test_graph_reads_agree_with_the_graph_onnxruntime_runs(tmp_path):
    """The Cast rule, checked against onnxruntime itself: the shipped depth graph (fp16
    stored, Cast to fp32) counts the same bytes as the graph onnxruntime optimises it into."""
    import onnxruntime as ort

    from codecspec.families.v2.model import default_v3_dir
    from codecspec.runtime.session import session_options

    src = default_v3_dir() / "depth.onnx"
    so = session_options()  # the process's thread pool, as every codecspec session
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    mine, theirs = perf.graph_reads(src), perf.graph_reads(tmp_path / "opt.onnx")
    assert theirs.dtypes.get("fp16", 0) == 0  # onnxruntime did fold the casts
    assert mine.streamed == theirs.streamed and mine.per_row == theirs.per_row
    stored = sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(src)).graph.initializer)
    assert mine.streamed + mine.tables > 1.9 * stored  # read as fp32, not as stored


def test_graph_reads_refuses_what_is_not_a_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="model"):
        perf.graph_reads(tmp_path / "none.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="model"):
        perf.graph_reads(tmp_path / "bad.onnx")
    with pytest.raises(ValueError, match="model"):
        perf.graph_reads(b"not a model at all")


def test_per_frame_bytes_and_the_depth_loop():
    assert perf.per_frame_bytes([(100, 2), (10, 0.5)]) == 205
    with pytest.raises(ValueError, match="reads"):
        perf.per_frame_bytes([(100, -1)])
    g = GraphReads(streamed=1000, per_row=10, tables=0)
    target, draft = perf.head_bank_bytes(3, 4, 5, targets_bf16=False)
    assert (target, draft) == (80, 40)
    G = 16
    by = perf.depth_loop_bytes(g, G, 13.0, tree_nodes=2, tree_depth=1, head_bytes=(80, 40))
    assert by["ar"] == 1020 + 14 * 1010 + 15 * 80  # prefill, G-2 steps, G-1 heads
    assert by["spec"] == 1020 + 12 * 1020 + (1 + 12 * 2) * 80 + 12 * 40
    # fewer speculative calls read fewer bytes; none accepted reads more than AR (drafts)
    fewer = perf.depth_loop_bytes(g, G, 8.0, tree_nodes=2, tree_depth=1, head_bytes=(80, 40))
    none = perf.depth_loop_bytes(g, G, 15.0, tree_nodes=2, tree_depth=1, head_bytes=(80, 40))
    assert fewer["spec"] < by["spec"] < by["ar"] < none["spec"]
    assert perf.depth_loop_bytes(g, G, None, tree_nodes=2, tree_depth=1)["spec"] is None


# ---------------------------------------------------------------------------- the record
def _record(ar_depth=40.0, spec_depth=25.0, calibration="spec"):
    return {
        "family": "test",
        "model": "/m",
        "provider": "CPUExecutionProvider",
        "threads": 2,
        "weights": "fp32",
        "bandwidth_gbps": 10.0,
        "stages": [
            perf.stage("temporal step", 5.0, 5.0, 50_000_000, 50_000_000),
            perf.stage("depth loop", ar_depth, spec_depth, 200_000_000, 120_000_000),
            perf.stage("vocoder", 10.0, 10.0, 10_000, 10_000, note="compute-bound"),
            perf.stage("depth loop alone", 30.0, 20.0, 1, 1, in_total=False),
        ],
        "depth_speedup": ar_depth / spec_depth,
        "tokens_per_call": 2.2,
        "audio_ms_per_frame": 80.0,
        "peak_rss_mb": 123.0,
        "calibration": {"depth": calibration},
    }


def test_finish_record_fills_bounds_totals_rtf():
    r = perf.finish_record(_record())
    depth = r["stages"][1]
    assert depth["bound_ms_ar"] == pytest.approx(20.0) and depth["bound_ms_spec"] == 12.0
    assert r["ms_per_frame"] == {"ar": 55.0, "spec": 40.0}  # the row measured alone left out
    assert r["bound_ms_per_frame"]["ar"] == pytest.approx(5.0 + 20.0 + 0.001)
    assert r["pipeline_rtf"]["spec"] == pytest.approx(40.0 / 80.0)
    json.dumps(r)  # the record is what --json prints


def test_render_table_prints_every_stage_and_the_verdict():
    r = perf.finish_record(_record())
    out = perf.render_table(r)
    for s in r["stages"]:
        assert s["name"] in out
    assert "verdict: speculation pays 1.60× here at 2.20 tokens per call" in out
    assert "vocoder: compute-bound" in out and "10.0 GB/s" in out and "RTF" in out
    depth = next(x for x in out.splitlines() if x.startswith("depth loop "))
    assert "1.60×" in depth and "200.0 MB/120.0 MB" in depth and "20/12" in depth


def test_the_verdict_says_ar_when_speculation_is_slower():
    slow = perf.finish_record(_record(ar_depth=20.0, spec_depth=25.0, calibration="ar"))
    assert slow["verdict"].startswith("AR is faster on this device (speculation 0.80×")
    assert slow["verdict"].endswith("calibration chose AR")
    # a calibration that chose spec where it does not pay is called out
    stale = perf.verdict(_record(ar_depth=20.0, spec_depth=25.0, calibration="spec"))
    assert "AR is faster" in stale and "recalibrate" in stale
    fast = perf.verdict(_record(ar_depth=40.0, spec_depth=25.0, calibration="spec"))
    assert fast.startswith("speculation pays 1.60×") and "AR is faster" not in fast
    # no depth speed-up in the record: the verdict reads the totals
    totals = {"ms_per_frame": {"ar": 10.0, "spec": 12.5}}
    assert perf.verdict(totals).startswith("AR is faster on this device (speculation 0.80×")
    assert "nothing to speculate" in perf.verdict({"ms_per_frame": {"ar": 1.0, "spec": None}})


def test_render_table_tolerates_missing_stages_and_none():
    bare = perf.render_table({})
    assert "verdict:" in bare
    r = perf.finish_record(
        {
            "family": "qwen3",
            "bandwidth_gbps": None,
            "stages": [{"name": "talker step", "ar_ms": 70.0, "spec_ms": None}],
            "audio_ms_per_frame": None,
        }
    )
    out = perf.render_table(r)
    assert "talker step" in out and r["bound_ms_per_frame"]["ar"] is None
    assert r["pipeline_rtf"] == {"ar": None, "spec": None}


# ---------------------------------------------------------------------------- the CLI
RECORD_KEYS = {
    "family",
    "model",
    "provider",
    "threads",
    "weights",
    "bandwidth_gbps",
    "stages",
    "ms_per_frame",
    "bound_ms_per_frame",
    "pipeline_rtf",
    "depth_speedup",
    "tokens_per_call",
    "audio_ms_per_frame",
    "peak_rss_mb",
    "verdict",
}
STAGE_KEYS = {"name", "ar_ms", "spec_ms", "bytes_ar", "bytes_spec", "bound_ms_ar", "bound_ms_spec"}


def check_record(res: dict, family: str, stages: list) -> None:
    """The bench record's keys and their sense (shared with the families' CLI tests)."""
    assert RECORD_KEYS <= set(res), RECORD_KEYS - set(res)
    assert res["family"] == family and res["bandwidth_gbps"] > 0.1
    assert [s["name"] for s in res["stages"]] == stages
    for s in res["stages"]:
        assert STAGE_KEYS <= set(s), (s["name"], STAGE_KEYS - set(s))
        assert s["ar_ms"] > 0 and s["bytes_ar"] >= 0
        if s["bytes_ar"]:
            want = 1e3 * s["bytes_ar"] / (1e9 * res["bandwidth_gbps"])
            assert s["bound_ms_ar"] == pytest.approx(want)
    # (no "measured > bound": weights that fit the cache are read faster than DRAM streams)
    assert res["ms_per_frame"]["ar"] > 0 and res["bound_ms_per_frame"]["ar"] > 0
    assert 10 < res["peak_rss_mb"] < 8192 and isinstance(res["verdict"], str)


def test_cli_bench_on_the_default_model_prints_the_record(capsys):
    from codecspec.cli import main

    argv = ["bench", "--frames", "2", "--texts", "1", "--threads", "1"]
    assert main(argv + ["--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    stages = ["frontend", "temporal step", "depth loop", "vocoder", "depth loop alone"]
    check_record(res, "v3", stages)
    depth, alone = res["stages"][2], res["stages"][4]
    # the calibrated v3 runs its depth loop AR on both sides; the speculative side's temporal
    # rounds batch their frames' depth loops, so it reads the weights fewer times per frame
    assert depth.get("spec_is_ar") and depth["bytes_ar"] > depth["bytes_spec"]
    assert "share each depth call" in depth["note"]
    assert alone["in_total"] is False and res["tokens_per_call"] > 1.0
    assert res["audio_ms_per_frame"] == 80.0 and res["weights"] == "fp32 (stored fp16)"
    assert res["pipeline_rtf"]["ar"] == pytest.approx(res["ms_per_frame"]["ar"] / 80.0)
    # the human output: the table and verdict, not a dump of the JSON's keys
    assert main(argv + ["--no-pipeline"]) == 0
    out = capsys.readouterr().out
    assert "verdict:" in out and "depth loop" in out and "bound ms" in out
    assert "ar_host_share" not in out and len(out.splitlines()) < 20


def test_cli_bench_completes_a_record_a_family_bench_returns(monkeypatch, capsys, tmp_path):
    """A bench that fills only its stages (the Qwen3-TTS bench's path): the CLI measures the
    bandwidth and peak RSS, fills the bounds, totals and verdict, and prints the table."""
    from codecspec.cli import main
    from codecspec.families.qwen3_tts import bench, checkpoint

    def fake_bench(model_dir, **kw):
        return {
            "family": "qwen3",
            "model": str(model_dir),
            "threads": 1,
            "stages": [
                perf.stage("talker step", 70.0, 70.0, 1_800_000_000, 1_800_000_000),
                perf.stage("depth loop", 176.0, 112.0, 4_800_000_000, 2_300_000_000),
            ],
            "depth_speedup": 176.0 / 112.0,
            "tokens_per_call": 2.18,
            "audio_ms_per_frame": 80.0,
        }

    monkeypatch.setattr(checkpoint, "is_qwen3_folder", lambda d: True)
    monkeypatch.setattr(bench, "bench_qwen3", fake_bench)
    assert main(["bench", "--model", str(tmp_path), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["bandwidth_gbps"] > 0.1 and res["peak_rss_mb"] > 10
    assert res["stages"][1]["bound_ms_spec"] > 0 and res["ms_per_frame"]["spec"] == 182.0
    assert res["pipeline_rtf"]["ar"] == pytest.approx(246.0 / 80.0)
    assert res["verdict"].startswith("speculation pays 1.57× here at 2.18 tokens per call")
    assert main(["bench", "--model", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "talker step" in out and "verdict: speculation pays" in out
