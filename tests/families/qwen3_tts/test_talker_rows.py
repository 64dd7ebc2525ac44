"""The Qwen3 talker steps of several served streams as one graph call (talker_rows.py): every
stream's codes stay bit-identical to `Qwen3TTS.generate_codes` (same seed and arguments)
whatever streams share the call, when they joined, how long their prompts are, and whether
the call pads slots that do not step; the shared K/V buffer grows without moving a stream's
bits; a broken batched graph (one shared sequence length) is caught by the load-time probe
and by the served codes.

Uses the tiny official-class CustomVoice checkpoint of tests/data/qwen3_tiny (head size 16:
the in-place talker graph) and drives the engine's loop step by step in this thread, so the
join times are exact.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from paths import DATA

pytest.importorskip("tokenizers")

import codecspec as cs  # noqa: E402
from codecspec.families.qwen3_tts.engine import Qwen3Family  # noqa: E402
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS  # noqa: E402
from codecspec.families.qwen3_tts.talker import Talker  # noqa: E402
from codecspec.families.qwen3_tts.talker_rows import (  # noqa: E402
    TalkerSlots,
    rows_agree,
    rows_graph,
    rows_graph_path,
)
from codecspec.pipeline.loop import Stream, StreamLoop, _Inbox  # noqa: E402
from codecspec.runtime.session import open_session  # noqa: E402
from codecspec.serve.engine import SpeechRequest  # noqa: E402

FOLDER = DATA / "qwen3_tiny" / "custom_equal"
TEXTS = (
    "Hello world.",
    "A second, longer sentence with many more words in it.",
    "Hi.",
    "Three four five six seven.",
    "One more.",
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_rows_cache")


@pytest.fixture(scope="module")
def family(cache):
    return Qwen3Family(FOLDER, 4, 64, "cpu", 1, cache_dir=cache)


@pytest.fixture(scope="module")
def reference(cache):
    return Qwen3TTS.load(FOLDER, cache_dir=cache, threads=1)


def _request(i: int, mode: str, greedy: bool) -> SpeechRequest:
    voice = ("aiden", "vivian", "eric")[i % 3]
    t = 0.0 if greedy and i % 2 == 0 else None  # greedy and sampled streams side by side
    return SpeechRequest(TEXTS[i % len(TEXTS)], voice=voice, mode=mode, seed=40 + i, temperature=t)


def _serve(family, schedule: list) -> list:
    """Runs (join step, request) pairs through the engine's loop in this thread: each request
    joins at its step (a free slot permitting, else at the first step one is free); returns
    each request's codes [T, G]."""
    loop = StreamLoop(family, family_slots(family))
    loop.prebuffer = False
    inboxes = [None] * len(schedule)
    step = 0
    while any(b is None for b in inboxes) or loop._active:
        for k, (at, req) in enumerate(schedule):
            if inboxes[k] is None and at <= step and loop._free:
                state = family.prepare(req, cs.Generator(int(req.seed)))
                inboxes[k] = _Inbox(state.frames, k)
                loop._join(Stream(handle=inboxes[k], request=req, state=state))
        loop._step()
        step += 1
    out = []
    for box in inboxes:
        errors = [v for kind, v in box.items if kind == "error"]
        assert not errors, errors
        out.append(np.stack([v for kind, v in box.items if kind == "frame"]))
    return out


def family_slots(family) -> int:
    return family.talker_rows.slots if family.talker_rows is not None else 1


def _want(reference, req: SpeechRequest) -> np.ndarray:
    return reference.generate_codes(
        req.input, speaker=req.voice, mode=req.mode, seed=req.seed, temperature=req.temperature
    ).codes


# ---------------------------------------------------------------------- the law
@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_streams_joining_at_different_times_are_each_generate_codes(
    family, reference, mode, greedy
):
    """Five streams of other prompt lengths on four slots: two join at once, one three steps
    later, one at step 6, and the fifth when a slot frees (a stream in a low slot leaves
    while higher ones step on: its slot is a padding row of their calls)."""
    assert family.talker_rows is not None  # fp32 on the CPU: the probe found rows exact
    rows = family.talker_rows
    calls0, stepped0 = rows.calls, rows.rows_stepped
    schedule = [(0, _request(0, mode, greedy)), (0, _request(1, mode, greedy))]
    schedule += [(3, _request(2, mode, greedy)), (6, _request(3, mode, greedy))]
    schedule += [(7, _request(4, mode, greedy))]
    got = _serve(family, schedule)
    for (_, req), codes in zip(schedule, got):
        want = _want(reference, req)
        assert codes.shape[0] >= 2 and np.array_equal(codes, want), (mode, req.seed)
    calls = rows.calls - calls0
    assert calls > 0 and rows.rows_stepped - stepped0 > 1.5 * calls  # batched, not per stream


def test_the_batched_step_is_each_talkers_own_step_across_growth(reference):
    """Talkers in slots 0, 2 and 3 of a shared buffer (slot 1 unused: a padding row), their
    caches made to grow several times by batched steps, a fourth joining mid-way: every
    hidden state equals the one of the same talker stepped alone on its own cache."""
    graph = reference.talker.graph
    session = open_session(str(rows_graph_path(graph.path)), "cpu", 1)
    c = graph.config
    rng = np.random.default_rng(3)
    head = np.zeros((1, c.hidden_size), np.float32)
    lens = {0: 4, 2: 9, 3: 2, 1: 6}  # slot -> prompt rows; slot 1 joins at step 5
    prompts = {
        s: rng.standard_normal((n, c.hidden_size)).astype(np.float32) for s, n in lens.items()
    }
    rows = rng.standard_normal((12, 4, c.hidden_size), np.float32)
    shared = TalkerSlots(session, c, 4, c.max_positions)
    talkers, alone, want, got = {}, {}, {}, {}
    for step in range(12):
        joining = [s for s in lens if s not in talkers and (s != 1 or step == 5)]
        for s in joining:
            talkers[s], alone[s] = Talker(graph, head), Talker(graph, head)
            shared.attach(talkers[s], s)
            for t in (talkers[s], alone[s]):
                t.prefill(prompts[s], capacity=lens[s] + 1)  # full after one step: it grows
        slots = sorted(talkers)
        hs = shared.step([talkers[s] for s in slots], [rows[step, s] for s in slots])
        for s, h in zip(slots, hs):
            got.setdefault(s, []).append(h)
            want.setdefault(s, []).append(alone[s].step(rows[step, s]))
    assert shared.capacity >= 9 + 12 and shared.calls == 12
    for s in lens:
        assert np.array_equal(np.stack(got[s]), np.stack(want[s])), s


def test_one_stream_steps_on_its_own_talker(family, reference):
    """A lone stream takes its own one-row call (no batched call, no padding rows)."""
    calls0 = family.talker_rows.calls
    req = _request(1, "ar", False)
    (codes,) = _serve(family, [(0, req)])
    assert np.array_equal(codes, _want(reference, req))
    assert family.talker_rows.calls == calls0


# ---------------------------------------------------------------------- broken variants
def _shared_seqlens(model: onnx.ModelProto) -> onnx.ModelProto:
    """The rows graph broken: every row attends over the longest row's length (one
    seqlens_k for all), as a batched call that ignored the rows' own lengths would."""
    g = model.graph
    g.node.extend(
        [
            helper.make_node("Shape", ["last_pos32"], ["rows_n"]),
            helper.make_node("Expand", ["rows_max_pos", "rows_n"], ["shared_seqlens"]),
        ]
    )
    for n in g.node:
        if n.op_type == "GroupQueryAttention":
            n.input[5] = "shared_seqlens"
    from codecspec.families.qwen3_tts.talker_rows import _topological

    nodes = _topological(list(g.node))
    del g.node[:]
    g.node.extend(nodes)
    return model


def _broken_session(graph):
    model = rows_graph(onnx.load(str(graph.path)))
    return open_session(_shared_seqlens(model).SerializeToString(), "cpu", 1)


def test_the_probe_refuses_a_batched_graph_with_one_shared_length(reference):
    graph = reference.talker.graph
    good = open_session(str(rows_graph_path(graph.path)), "cpu", 1)
    assert rows_agree(graph, good, 4)
    assert not rows_agree(graph, _broken_session(graph), 4)


def test_served_codes_catch_a_broken_batched_step(cache, reference):
    """The same engine with the broken graph behind its batched step: at least one stream's
    codes are no longer generate_codes' (the law test above can fail)."""
    fam = Qwen3Family(FOLDER, 4, 64, "cpu", 1, cache_dir=cache)
    graph = fam.tts.talker.graph
    fam.talker_rows = TalkerSlots(
        _broken_session(graph), graph.config, 4, graph.config.max_positions
    )
    schedule = [(k, _request(k, "ar", True)) for k in range(3)]
    got = _serve(fam, schedule)
    same = [np.array_equal(c, _want(reference, req)) for (_, req), c in zip(schedule, got)]
    assert not all(same), same


def test_a_precision_whose_rows_differ_keeps_the_per_stream_step(cache, monkeypatch):
    """Where the probe finds a batched row other than the row alone (int8's blocks of 128 on
    AVX-512), the engine builds no batched step: each talker steps alone, as before."""
    import codecspec.families.qwen3_tts.talker_rows as rows_mod

    monkeypatch.setattr(rows_mod, "rows_agree", lambda *a, **k: False)
    fam = Qwen3Family(FOLDER, 2, 64, "cpu", 1, cache_dir=cache)
    assert fam.talker_rows is None


def test_a_graph_that_is_not_the_in_place_talker_is_refused(reference):
    """The rewrite names what it looks for: the code predictor's graph is not a talker step."""
    depth = onnx.load(str(reference.depth.graph.path))
    with pytest.raises(ValueError, match="^model: not an in-place talker graph"):
        rows_graph(depth)
