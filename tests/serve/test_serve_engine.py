"""The continuous-batching engine: batched stages against the single-stream ones, the law of
a stream alone vs batched (with a broken batching that the same test must catch), joins and
leaves at frame boundaries, freed slots, the bounded queue."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from serve_util import HELLO, LONG, assert_idle, cancel_all, codes, ipa, wait_for

import codecspec as cs
from codecspec.decode.batched_depth import BatchedDepth, DepthLane
from codecspec.families.reference.model import ReferenceTTS, default_model_dir
from codecspec.families.reference.temporal_batch import batch_temporal_graph
from codecspec.fidelity import per_position_pvalues
from codecspec.serve.engine import Engine, Overloaded, SpeechRequest

SLOW = 668  # the seed of a long stream that must still be decoding while others join/cancel


def _slow(req, t):
    # Through the engine's per-stream fault hook: ~10 ms per frame for the SLOW stream, so the
    # timing tests do not depend on how loaded the machine is.
    if req.seed == SLOW:
        time.sleep(0.01)


@pytest.fixture(scope="module")
def engine():
    e = Engine("reference", max_streams=8, max_queue=8, threads=1, fault=_slow)
    yield e
    e.shutdown()


@pytest.fixture(autouse=True)
def idle_after(engine):
    """Every test leaves the shared engine idle (no active or queued stream)."""
    yield
    assert_idle(engine)


def test_idle_check_catches_a_stream_left_running(engine):
    """The autouse check is able to fail: a stream still decoding is caught (and cancelled)."""
    h = engine.submit(ipa(LONG, seed=SLOW))
    assert wait_for(lambda: h.count >= 1, timeout=60)
    with pytest.raises(AssertionError, match="1 active and 0 queued"):
        assert_idle(engine, grace=0.0)
    assert h.cancelled and h.done_at is not None


def test_batched_temporal_graph_matches_the_shipped_one(engine):
    """Three streams with different phoneme and frame counts in one padded, masked call give
    each stream's own single-stream outputs."""
    path = default_model_dir() / "temporal.onnx"
    single = engine.tts.temporal
    batched = cs_session(batch_temporal_graph(onnx.load(str(path))))
    rng = np.random.default_rng(0)
    P, T = [5, 9, 7], [0, 4, 2]
    one = []
    for p, t in zip(P, T):
        f = {
            "prev_latent": rng.standard_normal((1, 128)).astype(np.float32),
            "progress": np.array([0.3], np.float32),
            "speaker": np.array([2], np.int64),
            "is_first": np.array([float(t == 0)], np.float32),
            "cross_keys": rng.standard_normal((3, 1, 4, p, 64)).astype(np.float32),
            "cross_values": rng.standard_normal((3, 1, 4, p, 64)).astype(np.float32),
            "past_keys": rng.standard_normal((3, 1, 4, t, 64)).astype(np.float32),
            "past_values": rng.standard_normal((3, 1, 4, t, 64)).astype(np.float32),
        }
        one.append((f, single.run(None, f)))
    pm, tm = max(P), max(T)

    def pad(x, n, axis=3):
        w = [(0, 0)] * x.ndim
        w[axis] = (0, n - x.shape[axis])
        return np.pad(x, w, constant_values=7.0)  # junk in the padding: the mask hides it

    feeds = {
        k: np.concatenate([f[k] for f, _ in one], axis=0)
        for k in ("prev_latent", "progress", "speaker", "is_first")
    }
    for k in ("cross_keys", "cross_values"):
        feeds[k] = np.concatenate([pad(f[k], pm) for f, _ in one], axis=1)
    for k in ("past_keys", "past_values"):
        feeds[k] = np.concatenate([pad(f[k], tm) for f, _ in one], axis=1)
    sb = np.full((3, 1, 1, tm + 1), -np.inf, np.float32)
    cb = np.full((3, 1, 1, pm), -np.inf, np.float32)
    for i, (p, t) in enumerate(zip(P, T)):
        sb[i, ..., :t] = sb[i, ..., tm] = 0.0
        cb[i, ..., :p] = 0.0
    feeds.update(self_bias=sb, cross_bias=cb)
    h, logits, nk, _ = batched.run(None, feeds)
    for i, (_, (h1, l1, nk1, _)) in enumerate(one):
        np.testing.assert_allclose(h[i], h1[0], atol=1e-5)
        np.testing.assert_allclose(logits[i], l1[0], atol=1e-4)
        np.testing.assert_allclose(nk[:, i], nk1[:, 0], atol=1e-5)


def cs_session(model):
    from codecspec.runtime.session import open_session

    return open_session(model.SerializeToString(), provider="cpu", threads=1)


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_stream_alone_and_batched_equal_the_reference_tts(engine, mode):
    """Bit-identical: the engine's stream equals ReferenceTTS.generate with the same seed,
    alone and next to other streams (counter-based generators keyed per stream)."""
    tts: ReferenceTTS = engine.tts
    ref = tts.generate("", phonemes=HELLO, seed=11, mode=mode, decode_audio=False).codes
    alone = codes(engine.submit(ipa(seed=11, mode=mode)))
    others = ["ar", "spec", "ar"]
    hs = [engine.submit(ipa(LONG, seed=20 + k, mode=m)) for k, m in enumerate(others)]
    batched = engine.submit(ipa(seed=11, mode=mode))
    together = codes(batched)
    for h in hs:
        codes(h)
    np.testing.assert_array_equal(alone, ref)
    np.testing.assert_array_equal(together, ref)


def test_all_ar_batch_on_the_batch_axis_graph_equals_the_reference_tts(engine):
    """AR-only steps run on the batch-axis variant of the depth graph: still bit-identical."""
    seeds = [31, 32, 33]
    refs = [
        engine.tts.generate("", phonemes=HELLO, seed=s, mode="ar", decode_audio=False).codes
        for s in seeds
    ]
    hs = engine.submit_many([ipa(seed=s, mode="ar") for s in seeds])
    for h, ref in zip(hs, refs):
        np.testing.assert_array_equal(codes(h), ref)


class LeakyDepth(BatchedDepth):
    """Broken on purpose: every stream's queries see every stream's cache columns."""

    def _run(self, call) -> None:
        cols = call.bias.shape[1] - call.q
        rows = np.isfinite(call.bias[:, :cols]).any(axis=1)
        call.bias[np.ix_(rows, np.arange(cols))] = 0.0
        call.run()


def _batched_codes(depth_cls, dec, hiddens, c0s, seeds, lanes_per_step=8):
    bd = depth_cls(dec, lanes_per_step)
    out = np.zeros((len(c0s), dec.G), np.int64)
    for lo in range(0, len(c0s), lanes_per_step):
        idx = range(lo, min(lo + lanes_per_step, len(c0s)))
        # Ragged on purpose: AR and speculative lanes side by side.
        lanes = [
            DepthLane(spec=i % 3 != 0, params=dec.params, generator=cs.Generator(int(seeds[i])))
            for i in idx
        ]
        for ln, i in zip(lanes, idx):
            ln.codes = np.zeros(dec.G, np.int64)
            ln.codes[0] = c0s[i]
        bd.decode(hiddens[list(idx)], lanes)
        for ln, i in zip(lanes, idx):
            out[i] = ln.codes
    return out


def test_ragged_batched_speculation_has_the_law_of_single_stream_decoding(engine):
    """Histogram test, per code position, of single-stream `DepthDecoder` frames vs frames
    decoded 8 at a time with ragged trees (different seeds, so the test is about the law);
    the same test must catch a batching that leaks attention across streams. With equal
    seeds the batched codes are bit-identical to the single-stream ones."""
    dec = engine.tts.depth
    fr = np.load(default_model_dir() / "frames.npz")
    n = 400
    hiddens, c0s = fr["hiddens"][:n].astype(np.float32), fr["c0s"][:n]
    alone = np.stack(
        [
            dec.decode_frame(hiddens[i], int(c0s[i]), cs.Generator(i), "spec" if i % 3 else "ar")
            for i in range(n)
        ]
    )
    same_seeds = _batched_codes(BatchedDepth, dec, hiddens, c0s, np.arange(n))
    np.testing.assert_array_equal(same_seeds, alone)
    other = _batched_codes(BatchedDepth, dec, hiddens, c0s, np.arange(n) + 10**6)
    leaky = _batched_codes(LeakyDepth, dec, hiddens, c0s, np.arange(n) + 10**6)
    p_ok = per_position_pvalues(alone[:, 1:], other[:, 1:], dec.V)
    p_bad = per_position_pvalues(alone[:, 1:], leaky[:, 1:], dec.V)
    # 15 positions: Bonferroni at 1e-3 overall for the honest variant.
    assert p_ok.min() > 1e-3 / 15, p_ok
    assert p_bad.min() < 1e-6, p_bad


def test_join_and_leave_at_frame_boundaries(engine):
    """Short streams submitted once the long one has decoded 3 frames of its own join at a
    frame boundary while it runs, and leave before it ends (the engine steps every active
    stream once per step, so this order holds however loaded the machine is)."""
    long = engine.submit(ipa(LONG, seed=SLOW))
    try:
        assert wait_for(lambda: long.count >= 3, timeout=60)
        short = [engine.submit(ipa(seed=2 + k, speed=1.0 + k)) for k in range(2)]
        got = [codes(h) for h in short]
        assert [len(g) for g in got] == [h.frames for h in short]
        assert short[1].frames < short[0].frames  # faster speech, fewer frames
        assert long.first_frame_at < short[0].first_frame_at
        assert max(h.done_at for h in short) < wait_done(long)
        assert len(codes(long)) == long.frames
    finally:
        cancel_all(engine)
    assert len(engine._free) == engine.max_streams


def wait_done(handle) -> float:
    assert wait_for(lambda: handle.done_at is not None, timeout=120)
    return handle.done_at


def test_cancel_frees_the_slot_within_one_step(engine):
    h = engine.submit(ipa(LONG, seed=SLOW))
    it = iter(h)
    next(it)
    # Under the engine's lock no frame is emitted: the step in flight may still emit one
    # frame, then the next boundary drops the stream.
    with engine._cv:
        sent = h.count
        h.cancel()
    assert wait_for(lambda: h.done_at is not None, timeout=30)
    assert h.count - sent <= 1 and h.count < h.frames
    assert len(engine._free) == engine.max_streams and not engine._active


def test_bounded_queue_refuses_with_a_retry_hint():
    e = Engine("reference", max_streams=1, max_queue=1, threads=1, fault=_slow)
    try:
        first = e.submit(ipa(LONG, seed=SLOW))
        assert wait_for(lambda: e._active, timeout=30)
        queued = e.submit(ipa(seed=2))
        with pytest.raises(Overloaded) as exc:
            e.submit(ipa(seed=3))
        assert exc.value.retry_after >= 1.0
        assert len(codes(first)) == first.frames and len(codes(queued)) == queued.frames
    finally:
        e.shutdown()
    with pytest.raises(Overloaded):  # drained: no new work
        e.submit(ipa(seed=4))


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"input": ""}, "input"),
        ({"voice": "x"}, "voice"),
        ({"speed": float("nan")}, "speed"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 2.0}, "top_p"),
        ({"mode": "x"}, "mode"),
        ({"input_format": "ssml"}, "input_format"),
    ],
)
def test_engine_rejects_bad_requests_naming_the_field(engine, kw, field):
    req = SpeechRequest(**{"input": HELLO, "input_format": "ipa", **kw})
    with pytest.raises(ValueError, match=field):
        engine.submit(req)


def test_scaling_bench_reports_the_issue_fields(engine):
    from codecspec.serve.bench import engine_scaling, table

    rows = engine_scaling(engine, [1, 2], "ar", progress=False, texts=[HELLO], input_format="ipa")
    want = {
        "n",
        "aggregate_realtime",
        "per_stream_rtf_p50",
        "per_stream_rtf_p95",
        "ttfa_ms_p50",
        "ttfa_ms_p95",
    }
    assert [r["n"] for r in rows] == [1, 2] and all(want <= set(r) for r in rows)
    assert all(r["aggregate_realtime"] > 0 and r["tokens_per_call"] == 1.0 for r in rows)
    assert rows[1]["batch_tokens_per_call"] > 1.5  # two streams per depth call
    assert "| ar | 2 |" in table(rows)


def test_cli_registers_serve_loadtest_and_bench_streams():
    from codecspec.cli import build_parser

    ap = build_parser()
    a = ap.parse_args(["serve"])
    assert (a.host, a.port, a.max_streams) == ("127.0.0.1", 8000, 16)
    a = ap.parse_args(["bench", "--streams", "1,4,16,64", "--json"])
    assert a.streams == [1, 4, 16, 64] and a.json
    a = ap.parse_args(["loadtest", "--clients", "1,4"])
    assert a.clients == [1, 4] and a.requests == 3
    with pytest.raises(SystemExit):
        ap.parse_args(["bench", "--streams", "0,4"])
