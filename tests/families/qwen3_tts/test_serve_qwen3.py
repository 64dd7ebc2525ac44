"""Qwen3-TTS checkpoint folders served by the engine (`codecspec serve --model DIR`): each
stream's codes are bit-identical to `Qwen3TTS.generate_codes` with the same seed and
arguments, alone or beside another stream, AR and speculative, greedy and sampled; the
OpenAI fields (voice, instructions, language, speed, sampling) reach the model or are
refused in OpenAI's error shape; the audio is the 12 Hz decoder's at 24 kHz.

Uses the tiny official-class checkpoints of tests/data/qwen3_tiny (max_new_tokens 20, so a
stream has at most 19 frames); graphs are built into a temporary cache.
"""

from __future__ import annotations

import io
import json
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest
from paths import DATA

pytest.importorskip("tokenizers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from serve_util import LocalServer, assert_idle, codes  # noqa: E402

import codecspec as cs  # noqa: E402
from codecspec.families.qwen3_tts.engine import Qwen3Family  # noqa: E402
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS  # noqa: E402
from codecspec.families.qwen3_tts.steps import Qwen3Steps  # noqa: E402
from codecspec.pipeline.loop import run_inline  # noqa: E402
from codecspec.serve.app import chunk_frames  # noqa: E402
from codecspec.serve.audio import pcm16  # noqa: E402
from codecspec.serve.engine import Engine, SpeechRequest  # noqa: E402
from codecspec.serve.openai_api import OPENAI_VOICES, voice_map  # noqa: E402

DATA = DATA / "qwen3_tiny"
TEXT = "Hello world."
STYLE = "A deep, slow voice."


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_serve_cache")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The variants as servable folders: only custom_equal ships speech-decoder weights, so
    the others get a copy of its (same 12 Hz layout, same 32-code codebooks)."""
    root = tmp_path_factory.mktemp("qwen3_serve_models")
    out = {"custom_equal": DATA / "custom_equal"}
    for v in ("design_wide", "base_xvector"):
        shutil.copytree(DATA / v, root / v, ignore=shutil.ignore_patterns("speech_tokenizer"))
        shutil.copytree(DATA / "custom_equal" / "speech_tokenizer", root / v / "speech_tokenizer")
        out[v] = root / v
    return out


def _server(folder, cache):
    def factory():
        return Engine(folder, max_streams=2, max_queue=2, threads=1, cache_dir=cache)

    return LocalServer(factory)


@pytest.fixture(scope="module")
def custom(cache, folders):
    with _server(folders["custom_equal"], cache) as s:
        yield s


@pytest.fixture(scope="module")
def design(cache, folders):
    with _server(folders["design_wide"], cache) as s:
        yield s


@pytest.fixture(scope="module")
def reference(cache, folders):
    """variant -> the single-stream runtime on its own objects (the engine's are busy in its
    thread)."""
    made: dict = {}

    def get(variant) -> Qwen3TTS:
        if variant not in made:
            made[variant] = Qwen3TTS.load(folders[variant], cache_dir=cache, threads=1)
        return made[variant]

    return get


@pytest.fixture(autouse=True)
def idle_after(request):
    """Every test leaves each engine it used idle (no active or queued stream)."""
    yield
    for name in ("custom", "design"):
        if name in request.fixturenames:
            assert_idle(request.getfixturevalue(name).engine)


def post(server, **body):
    body = {"input": TEXT, **body}
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=120)


def wav_samples(data: bytes):
    """(sample rate, int16 samples) of a WAV body."""
    with wave.open(io.BytesIO(data)) as w:
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), "<i2")


def streamed_pcm(tts: Qwen3TTS, frames: np.ndarray) -> np.ndarray:
    """The int16 samples the server should send for these codes: one decoder state fed the
    app's chunks (1, 1, 2, 4, 8, 10, ... frames). (Equal to the whole decode to float rounding; the
    tiny random decoder saturates at +-1, where rounding can flip a near-zero sample's sign,
    so the comparison uses the same chunks and is exact.)"""
    stream, parts, sent = tts.speech_decoder().open_stream(), [], 0
    while sent < len(frames):
        n = chunk_frames(sent, Qwen3Family.first_chunk_frames)
        parts.append(stream.feed(frames[sent : sent + n]))
        sent += n
    return np.frombuffer(pcm16(np.concatenate(parts)), "<i2")


# ---------------------------------------------------------------------- the law
@pytest.mark.parametrize("temperature", [0.0, None])  # greedy; the checkpoint's sampling
@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_two_concurrent_streams_are_each_generate_codes(custom, reference, mode, temperature):
    ref = reference("custom_equal")
    reqs = [
        SpeechRequest(
            TEXT, voice="aiden", language="en", mode=mode, seed=7, temperature=temperature
        ),
        SpeechRequest(
            "A second, longer sentence.",
            voice="vivian",
            language="english",
            mode=mode,
            seed=8,
            temperature=temperature,
            top_k=None if temperature == 0 else 20,
        ),
    ]
    handles = custom.engine.submit_many(reqs)  # join at the same step
    for req, h in zip(reqs, handles):
        want = ref.generate_codes(
            req.input,
            speaker=req.voice,
            language="english",
            mode=mode,
            seed=req.seed,
            temperature=temperature,
            top_k=req.top_k,
        ).codes
        got = codes(h)
        assert got.shape[0] >= 2 and np.array_equal(got, want), (mode, temperature, req.seed)


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_subtalker_fields_set_the_code_predictors_law(custom, reference, mode):
    """subtalker_* over HTTP reach the code predictor as the official keywords do: the
    served codes are generate_codes' with the same keywords, and a greedy code predictor
    under the sampled talker gives other codes than the checkpoint's sampled one."""
    ref = reference("custom_equal")
    body = {"voice": "aiden", "seed": 5, "mode": mode, "response_format": "pcm"}
    kw = {"subtalker_temperature": 0.0}
    want = ref.generate_codes(TEXT, speaker="aiden", mode=mode, seed=5, **kw)
    sampled = ref.generate_codes(TEXT, speaker="aiden", mode=mode, seed=5)
    assert not np.array_equal(want.codes, sampled.codes)  # the field must matter here
    r = post(custom, **body, **kw)
    assert r.status_code == 200, r.text
    assert len(r.content) == 2 * want.frames * custom.engine.family.hop
    h = custom.engine.submit(SpeechRequest(TEXT, voice="aiden", mode=mode, seed=5, **kw))
    assert np.array_equal(codes(h), want.codes)
    kw = {"subtalker_temperature": 0.5, "subtalker_top_k": 3, "subtalker_top_p": 0.9}
    want = ref.generate_codes(TEXT, speaker="aiden", mode=mode, seed=6, **kw)
    h = custom.engine.submit(SpeechRequest(TEXT, voice="aiden", mode=mode, seed=6, **kw))
    assert np.array_equal(codes(h), want.codes)


def test_concurrent_ar_streams_share_one_depth_loop(custom):
    """Two AR streams in one step: their depth loops run as one batched loop over the code
    predictor's graph (one call per level for both), not one loop each."""
    c0 = custom.engine.family.counters()
    reqs = [SpeechRequest(TEXT, voice=v, mode="ar", seed=s) for v, s in (("aiden", 3), ("eric", 4))]
    for h in custom.engine.submit_many(reqs):
        codes(h)
    c1 = custom.engine.family.counters()
    calls, lanes = c1["calls"] - c0["calls"], c1["lane_calls"] - c0["lane_calls"]
    assert lanes > 1.5 * calls, (calls, lanes)  # one loop each: lanes == calls


def test_a_request_that_names_no_language_gets_the_official_auto(custom, reference):
    """The Python engine API as over HTTP: no language is the official default ("Auto": the
    nothink prefix), not English, whose language tag gives other codes."""
    ref = reference("custom_equal")
    got = codes(custom.engine.submit(SpeechRequest(TEXT, voice="aiden", seed=7, temperature=0)))
    assert np.array_equal(
        got, ref.generate_codes(TEXT, speaker="aiden", seed=7, temperature=0).codes
    )
    english = ref.generate_codes(TEXT, speaker="aiden", language="english", seed=7, temperature=0)
    assert not np.array_equal(got, english.codes)  # the comparison can fail


def test_a_different_seed_gives_different_codes(custom, reference):
    # the broken variant of the identity above: the comparison can fail
    got = codes(custom.engine.submit(SpeechRequest(TEXT, voice="aiden", seed=7)))
    want = reference("custom_equal").generate_codes(TEXT, speaker="aiden", seed=9)
    assert not np.array_equal(got, want.codes)


def test_a_stream_ends_at_eos_without_an_extra_frame(custom, reference):
    """A sampled stream that stops at eos before the frame limit has exactly generate's
    frames (the step that samples eos emits none)."""
    ref = reference("custom_equal")
    for seed in range(20):
        r = ref.generate_codes(TEXT, speaker="eric", seed=seed)  # no language: both "auto"
        if not r.hit_max_frames:
            break
    else:
        pytest.skip("no seed below 20 stops at eos on this checkpoint")
    h = custom.engine.submit(SpeechRequest(TEXT, voice="eric", seed=seed))
    assert np.array_equal(codes(h), r.codes) and h.count == r.frames
    state = custom.engine.family.prepare(
        custom.engine.check(SpeechRequest(TEXT, voice="eric", seed=seed)), cs.Generator(seed)
    )
    list(run_inline(Qwen3Steps({0: ref}), state))  # the engine's runtimes are its thread's
    assert state.stopped is True  # eos ended it, as a stop head's verdict


def test_a_request_max_frames_cuts_the_stream_as_generate_codes(custom, reference):
    """A request's `max_frames` is its guard below the engine's (as for every family): the
    stream is generate_codes(max_frames=N)'s frames, and the stream's state says the guard,
    not eos, ended it. One over the engine's limit gets the engine's limit."""
    ref, kw = reference("custom_equal"), dict(seed=7, temperature=0)
    want = ref.generate_codes(TEXT, speaker="aiden", max_frames=5, **kw)
    assert want.hit_max_frames and want.frames == 5  # the guard, not eos, ends it
    h = custom.engine.submit(SpeechRequest(TEXT, voice="aiden", max_frames=5, **kw))
    assert np.array_equal(codes(h), want.codes) and h.count == 5
    full = ref.generate_codes(TEXT, speaker="aiden", **kw)  # the checkpoint's 19 frames
    h = custom.engine.submit(SpeechRequest(TEXT, voice="aiden", max_frames=10**6, **kw))
    assert np.array_equal(codes(h), full.codes)
    # the finish reason, as FSQ and v2 report theirs (state.stopped: True eos, False guard)
    state = custom.engine.family.prepare(
        custom.engine.check(SpeechRequest(TEXT, voice="aiden", max_frames=5, **kw)),
        cs.Generator(7),
    )
    got = np.stack(list(run_inline(Qwen3Steps({0: ref}), state)))
    assert np.array_equal(got, want.codes)
    assert state.stopped is False
    with pytest.raises(ValueError, match="max_frames"):
        custom.engine.submit(SpeechRequest(TEXT, voice="aiden", max_frames=0))


def test_a_slot_left_mid_stream_serves_the_next_stream_exactly(custom, reference):
    """Streams cancelled after their first frame leave their slots' runtimes mid-utterance
    (unless they ended first: the tiny model is quick); the streams that take the slots
    next are still exactly generate_codes."""
    from serve_util import wait_for

    engine = custom.engine
    gone = engine.submit_many([SpeechRequest(TEXT, voice="aiden", seed=k) for k in (30, 31)])
    assert wait_for(lambda: all(h.count >= 1 for h in gone), timeout=60)
    for h in gone:
        h.cancel()
    assert wait_for(lambda: all(h.done_at is not None for h in gone), timeout=60)
    hs = engine.submit_many([SpeechRequest(TEXT, voice="vivian", seed=k) for k in (32, 33)])
    ref = reference("custom_equal")
    for k, h in zip((32, 33), hs):
        want = ref.generate_codes(TEXT, speaker="vivian", seed=k)
        assert np.array_equal(codes(h), want.codes)


def test_slot_runtimes_share_the_loaded_graphs(custom):
    """Each slot's runtime has its own talker cache and depth-loop state over the one set of
    loaded sessions, tables and heads (nothing is loaded per stream)."""
    base = custom.engine.family.tts
    a, b = base.replica(), base.replica()
    for r in (a, b):
        assert r.talker.graph is base.talker.graph and r.depth.graph is base.depth.graph
        assert r.depth.bank is base.depth.bank and r.text_proj is base.text_proj
        assert r.code_tables is base.code_tables and r.tok is base.tok
    assert a.talker is not b.talker and a.depth.cache is not b.depth.cache


def test_mode_auto_follows_the_calibration(custom):
    """The decision in the one format (decision.json), and a folder calibrated before it
    (speculation.json's "speculate"); the new file wins where both are."""
    from codecspec.calibrate.decision import DECISION_FILE, write_decision

    fam = custom.engine.family
    new, old = fam.tts.calibration_file(DECISION_FILE), fam.tts.calibration_file("speculation.json")
    assert not new.exists() and not old.exists()
    assert fam.request_kwargs(SpeechRequest(TEXT))["mode"] == "ar"
    try:
        old.write_text(json.dumps({"speculate": True}))
        assert fam._speculation_pays()
        write_decision(new, speculate=False, why="measured 0.9x AR")
        assert not fam._speculation_pays()
        old.unlink()
        write_decision(new, speculate=True, why="measured 1.2x AR")
        assert fam._speculation_pays()
    finally:
        for f in (new, old):
            f.unlink(missing_ok=True)
    assert not fam._speculation_pays()


def test_base_checkpoint_needs_a_reference_recording(cache, folders, reference):
    base, wav = folders["base_xvector"], DATA / "ref.wav"
    with pytest.raises(ValueError, match="ref-audio"):
        Engine(base, max_streams=1, threads=1, cache_dir=cache)
    with pytest.raises(ValueError, match="ref_audio"):
        Engine(folders["custom_equal"], threads=1, cache_dir=cache, ref_audio=wav)
    e = Engine(base, max_streams=1, threads=1, cache_dir=cache, ref_audio=wav)
    try:
        got = codes(e.submit(SpeechRequest(TEXT, seed=3, temperature=0)))
        want = reference("base_xvector").generate_codes(TEXT, ref_audio=wav, seed=3, temperature=0)
        assert np.array_equal(got, want.codes)
        assert_idle(e)
    finally:
        e.shutdown(drain=False)


# ---------------------------------------------------------------------- the prompt layout
def _official(variant: str) -> tuple:
    cases = json.loads((DATA / f"{variant}.cases.json").read_text(encoding="utf-8"))
    return cases, np.load(DATA / f"{variant}.fixtures.npz")


def _body(case: dict) -> dict:
    """The HTTP body of an official fixture case: only the fields the official call had
    (a case without non_streaming_mode / language leaves them to the server's defaults)."""
    body = {"input": case["text"], "temperature": 0, "response_format": "pcm"}
    if "speaker" in case:
        body["voice"] = case["speaker"]
    if "language" in case:
        body["language"] = case["language"]
    if "non_streaming_mode" in case:
        body["streaming_text"] = not case["non_streaming_mode"]
    return body


def test_requests_get_the_official_layouts_over_http(custom, reference):
    """CustomVoice: no `streaming_text` is the whole-text layout (generate_custom_voice's
    default), `true` the streaming one; each equals the official greedy codes, and a body
    without a language gets the official "Auto" (a dialect speaker's tag here)."""
    cases, z = _official("custom_equal")
    picked = [i for i, c in enumerate(cases) if "non_streaming_mode" in c or "language" not in c]
    assert {"non_streaming_mode" in cases[i] for i in picked} == {True, False}
    ref = reference("custom_equal")
    for i in picked:
        r = post(custom, **_body(cases[i]))
        assert r.status_code == 200, r.text
        want = streamed_pcm(ref, z[f"case_{i}_codes"])
        assert np.array_equal(np.frombuffer(r.content, "<i2"), want), i


def test_a_base_clone_is_served_in_the_official_default_layout(cache, folders, reference):
    """Issue 49: a Base checkpoint's request without `streaming_text` gets the layout of
    generate_voice_clone called without non_streaming_mode (streaming text), and `false`
    its whole-text layout: the official greedy codes of every fixture case, over HTTP."""
    cases, z = _official("base_xvector")
    base, wav = folders["base_xvector"], DATA / "ref.wav"

    def factory():
        return Engine(base, max_streams=1, threads=1, cache_dir=cache, ref_audio=wav)

    ref = reference("base_xvector")
    with LocalServer(factory) as server:
        for i, case in enumerate(cases):
            r = post(server, **_body(case))
            assert r.status_code == 200, r.text
            want = streamed_pcm(ref, z[f"case_{i}_codes"])
            assert np.array_equal(np.frombuffer(r.content, "<i2"), want), i
        assert_idle(server.engine)


def test_a_bad_layout_is_refused_naming_the_field(custom):
    """Straight to the engine (no typed body in between) a layout that is not a bool or
    None is refused, naming the field; so is one asked of a family with a single layout."""
    from codecspec.pipeline.family import Family

    with pytest.raises(ValueError, match="^streaming_text: must be True"):
        custom.engine.submit(SpeechRequest(TEXT, voice="aiden", streaming_text="yes"))
    single = Family.__new__(Family)
    single.name, single.modes = "reference", ("ar",)
    Family.check(single, SpeechRequest(TEXT))  # absent: fine
    with pytest.raises(ValueError, match="^streaming_text: the reference model has one"):
        Family.check(single, SpeechRequest(TEXT, streaming_text=False))


# ---------------------------------------------------------------------- OpenAI fields
def test_instructions_reach_a_voice_design_prompt(design, reference):
    ref = reference("design_wide")
    h = design.engine.submit(SpeechRequest(TEXT, seed=5, temperature=0, instructions=STYLE))
    got = codes(h)
    want = ref.generate_codes(TEXT, instruct=STYLE, seed=5, temperature=0)
    assert np.array_equal(got, want.codes)
    plain = ref.generate_codes(TEXT, seed=5, temperature=0)
    assert len(want.prompt) > len(plain.prompt)  # the instruction rows are in the prompt
    assert not np.array_equal(plain.codes, want.codes)  # and they change the codes


def test_voice_design_over_http_uses_instructions_and_ignores_voice(design, reference):
    r = post(
        design, voice="coral", instructions=STYLE, seed=5, temperature=0, response_format="wav"
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-codecspec-ignored"] == "voice"  # instructions are used
    ref = reference("design_wide")
    # no language in the body: the official default ("auto"), as generate_codes' own
    want = ref.generate_codes(TEXT, instruct=STYLE, seed=5, temperature=0)
    assert int(r.headers["x-codecspec-frames"]) == want.frames
    rate, x = wav_samples(r.content)
    assert rate == 24000 and len(x) == 1920 * want.frames
    assert np.array_equal(x, streamed_pcm(ref, want.codes))


def test_instructions_on_a_small_custom_voice_are_reported_ignored(custom, reference):
    r = post(
        custom, voice="aiden", instructions=STYLE, seed=4, temperature=0, response_format="wav"
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-codecspec-ignored"] == "instructions"
    want = reference("custom_equal").generate_codes(TEXT, speaker="aiden", seed=4, temperature=0)
    assert int(r.headers["x-codecspec-frames"]) == want.frames
    # straight to the engine (no app in between) the field is refused, naming it
    with pytest.raises(ValueError, match="^instructions"):
        custom.engine.submit(SpeechRequest(TEXT, voice="aiden", instructions=STYLE))


def test_wav_is_24khz_audio_of_the_frames_made(custom, reference):
    r = post(custom, voice="vivian", seed=6, response_format="wav", model="qwen3-tts")
    assert r.status_code == 200, r.text
    ref = reference("custom_equal")
    want = ref.generate_codes(TEXT, speaker="vivian", seed=6)
    frames = int(r.headers["x-codecspec-frames"])
    rate, x = wav_samples(r.content)
    assert frames == want.frames and rate == 24000 and len(x) == 1920 * frames
    assert int(r.headers["x-codecspec-samples"]) == len(x)
    # chunk by chunk through one decoder state per stream (re-decoding each chunk from a
    # little context instead differs in ~13 % of the samples) ...
    assert np.array_equal(x, streamed_pcm(ref, want.codes))
    # ... which is the whole decode but for float rounding (a rare sign flip at +-1, above)
    whole = np.frombuffer(pcm16(ref.speech_decoder().decode(want.codes)), "<i2")
    assert np.mean(np.abs(x.astype(int) - whole) > 2) < 1e-3


def test_pcm_stream_has_the_frames_samples(custom, reference):
    r = post(custom, voice="aiden", seed=2, temperature=0, response_format="pcm")
    assert r.status_code == 200, r.text
    assert r.headers["x-codecspec-sample-rate"] == "24000"
    ref = reference("custom_equal")
    want = ref.generate_codes(TEXT, speaker="aiden", seed=2, temperature=0)
    assert np.array_equal(np.frombuffer(r.content, "<i2"), streamed_pcm(ref, want.codes))


def _metric(text: str, name: str) -> float:
    line = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
    return float(line.split()[1])


def test_first_audio_is_one_frame_and_its_time_is_in_the_metrics(custom):
    """A Qwen3-TTS stream's first chunk is one frame (the other families' three: their
    vocoders want context); the server counts each request's time to its first audio."""
    from codecspec.pipeline.family import Family

    assert chunk_frames(0, Qwen3Family.first_chunk_frames) == 1
    assert [chunk_frames(s, 1) for s in (1, 2, 4, 8, 16)] == [1, 2, 4, 8, 10]
    assert chunk_frames(0, Family.first_chunk_frames) == 3
    before = httpx.get(custom.url + "/metrics", timeout=30).text
    n0 = _metric(before, "codecspec_time_to_first_audio_seconds_count")
    r = post(custom, voice="aiden", seed=5, temperature=0, response_format="pcm")
    assert r.status_code == 200, r.text
    after = httpx.get(custom.url + "/metrics", timeout=30).text
    assert _metric(after, "codecspec_time_to_first_audio_seconds_count") == n0 + 1
    assert _metric(after, "codecspec_time_to_first_audio_seconds_sum") > 0
    assert _metric(after, "codecspec_time_to_first_audio_median_seconds") > 0
    # a WAV of unknown length is one body: counted once, when it is ready
    r = post(custom, voice="aiden", seed=5, temperature=0, response_format="wav")
    assert r.status_code == 200, r.text
    last = httpx.get(custom.url + "/metrics", timeout=30).text
    assert _metric(last, "codecspec_time_to_first_audio_seconds_count") == n0 + 2


def test_every_openai_voice_maps_to_a_speaker(custom, reference):
    speakers = custom.engine.voices
    m = voice_map(list(speakers))
    assert set(OPENAI_VOICES) <= set(m) and all(m[v] in speakers for v in OPENAI_VOICES)
    assert voice_map(list(speakers)) == m  # deterministic
    r = post(custom, voice="coral", seed=4, temperature=0, response_format="wav")
    assert r.status_code == 200, r.text
    want = reference("custom_equal").generate_codes(TEXT, speaker=m["coral"], seed=4, temperature=0)
    assert int(r.headers["x-codecspec-frames"]) == want.frames


def test_models_lists_the_folder_name(custom):
    names = [m["id"] for m in httpx.get(custom.url + "/v1/models").json()["data"]]
    assert names[:2] == ["qwen3-tts-custom_equal", "qwen3-tts"]
    assert post(custom, voice="aiden", model="qwen3-tts-custom_equal", seed=1).status_code == 200


@pytest.mark.parametrize(
    "body,param",
    [
        ({"voice": "nobody"}, "voice"),
        ({"language": "klingon"}, "language"),
        ({"language": "de"}, "language"),  # a code the checkpoint does not speak
        ({"speed": 1.5}, "speed"),
        ({"top_k": 10**6}, "top_k"),
        ({"temperature": 11.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"input_format": "ipa"}, "input_format"),
        ({"mode": "pcg"}, "mode"),
        ({"model": "codecspec-fsq"}, "model"),
        ({"input": " "}, "input"),
        ({"streaming_text": "true"}, "streaming_text"),  # strict: a JSON boolean or null
        ({"streaming_text": 1}, "streaming_text"),
        ({"subtalker_temperature": -0.5}, "subtalker_temperature"),
        ({"subtalker_top_k": -1}, "subtalker_top_k"),
        ({"subtalker_top_p": 1.5}, "subtalker_top_p"),
        ({"subtalker_top_k": "5"}, "subtalker_top_k"),  # strict: a JSON integer
    ],
)
def test_bad_fields_are_400_naming_the_param(custom, body, param):
    before = custom.engine.metrics()["frames_total"]
    r = post(custom, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert err["code"] and param in err["message"]
    assert custom.engine.metrics()["frames_total"] == before  # nothing decoded


def test_engine_refuses_bad_sampling_naming_the_field(custom):
    bad = [("temperature", -1.0), ("top_k", -1), ("top_p", 1.5)]
    bad += [("subtalker_temperature", -1.0), ("subtalker_top_k", -1), ("subtalker_top_p", 0.0)]
    for field, value in bad:
        with pytest.raises(ValueError, match=f"^{field}"):
            custom.engine.submit(SpeechRequest(TEXT, voice="aiden", **{field: value}))


# ---------------------------------------------------------------------- the command
def test_serve_command_refuses_a_base_folder_in_one_line(folders, capsys):
    from codecspec.cli import main

    rc = main(["serve", "--model", str(folders["base_xvector"])])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--ref-audio" in err and "\n" not in err


def test_serve_command_refuses_a_missing_folder(capsys):
    from codecspec.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--model", str(DATA / "no_such_folder")])
    assert "--model" in capsys.readouterr().err


def test_sse_pcm_is_the_streamed_decode(custom, reference):
    import base64

    body = {"input": TEXT, "voice": "eric", "seed": 12, "response_format": "pcm"}
    r = httpx.post(
        custom.url + "/v1/audio/speech", json={**body, "stream_format": "sse"}, timeout=120
    )
    assert r.status_code == 200, r.text
    events = [json.loads(x[6:]) for x in r.text.split("\n\n") if x.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    ref = reference("custom_equal")
    want = ref.generate_codes(TEXT, speaker="eric", seed=12)
    assert events[-1]["usage"]["output_tokens"] == want.frames
    assert np.array_equal(np.frombuffer(pcm, "<i2"), streamed_pcm(ref, want.codes))


def test_serve_command_serves_a_folder(folders, tmp_path):
    """`codecspec serve --model DIR --cache-dir C` as a process answers a request."""
    import os
    import signal
    import subprocess
    import sys

    from serve_util import free_port, wait_for

    import codecspec

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    here = str(Path(codecspec.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "codecspec.cli", "serve", "--port", str(port), "--threads", "1"]
    cmd += ["--model", str(folders["design_wide"]), "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.Popen(cmd, env=env)

    def up() -> bool:
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        assert wait_for(up, timeout=120, every=0.2), "server did not come up"
        names = [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]]
        assert names[0] == "qwen3-tts-design_wide"
        body = {"input": TEXT, "instructions": STYLE, "seed": 1, "response_format": "wav"}
        r = httpx.post(url + "/v1/audio/speech", json=body, timeout=120)
        assert r.status_code == 200, r.text
        rate, x = wav_samples(r.content)
        assert rate == 24000 and len(x) == 1920 * int(r.headers["x-codecspec-frames"]) > 0
        assert any((tmp_path / "cache").iterdir())  # the graphs were built where told
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_int8_decoder_serves_its_audio_of_the_same_codes(cache, folders, reference):
    """`serve --decoder-precision int8`: the frames are the float32 server's (generate_codes),
    the audio the int8 decoder's, chunk by chunk."""
    folder = folders["custom_equal"]

    def factory():
        return Engine(folder, max_streams=1, threads=1, cache_dir=cache, decoder_precision="int8")

    int8 = Qwen3TTS.load(folder, cache_dir=cache, threads=1, decoder_precision="int8")
    want = reference("custom_equal").generate_codes(TEXT, speaker="vivian", seed=6)
    with LocalServer(factory) as server:
        assert server.engine.family.codec.decoder.precision == "int8"
        r = post(server, voice="vivian", seed=6, response_format="wav")
    assert r.status_code == 200, r.text
    assert int(r.headers["x-codecspec-frames"]) == want.frames
    _, x = wav_samples(r.content)
    assert np.array_equal(x, streamed_pcm(int8, want.codes))
    assert not np.array_equal(x, streamed_pcm(reference("custom_equal"), want.codes))
