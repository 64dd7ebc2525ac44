"""Adding a model family is one package, one registry line and its tests (issue 30).

The example family (tests/example_family/) joins through the registry's public `register`;
then the registry finds its folders, `load_model` opens them, the serving engine batches its
streams and the HTTP server speaks with it — with no module of the `codecspec` package
naming it. Its streams, alone and batched with streams that join and leave, equal its own
`generate` bit for bit, and so does the WAV `/v1/audio/speech` returns."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from example_family import ENTRY, FORMAT
from example_family.engine import ToyFamily
from example_family.model import G, ToyTTS, write_folder
from serve_util import LocalServer, assert_idle, cancel_all, codes

import codecspec
from codecspec.pipeline import registry
from codecspec.pipeline.registry import Entry
from codecspec.serve.engine import Engine, SpeechRequest

SHORT = "Hello there."
LONG = "A longer line, so that this stream is still running when others join and leave."


@pytest.fixture(scope="module")
def registered():
    registry.register(ENTRY)  # the family's one registry line
    yield ENTRY
    registry.unregister(ENTRY.name)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("example_toy"))


class HoldLong:
    """The engine's per-stream hook (`fault`), run inside each step: the LONG stream stops at
    its frame 3 until the test releases it, so streams submitted meanwhile join it
    mid-utterance, and leave before it ends, by the engine's steps, not by the clock."""

    def __init__(self):
        self.reached, self.release = threading.Event(), threading.Event()

    def __call__(self, request, frame) -> None:
        if request.input == LONG and frame == 3 and not self.release.is_set():
            self.reached.set()
            self.release.wait(timeout=60)


@pytest.fixture(scope="module")
def engine(registered, folder):
    e = Engine(str(folder), max_streams=3, max_queue=8, threads=1, fault=HoldLong())
    yield e
    e.shutdown()


@pytest.fixture
def idle(engine):
    yield engine
    assert_idle(engine)


def reference(engine, text, seed, **kw) -> np.ndarray:
    return engine.tts.generate(text, seed=seed, decode_audio=False, **kw).codes


def test_the_registry_finds_the_family_of_its_folders(registered, folder):
    from codecspec.pipeline.registry import load_model, model_family

    assert registry.family_of(str(folder)) is ENTRY and model_family(str(folder)) == ENTRY.name
    assert registry.formats()[FORMAT] == ENTRY.name
    assert isinstance(load_model(str(folder)), ToyTTS)
    assert ENTRY.load("engine") is ToyFamily and ToyFamily.detect(folder)
    with pytest.raises(ValueError, match="^family: 'example-toy' is registered already"):
        registry.register(ENTRY)
    with pytest.raises(ValueError, match="^family: format .* is read by the example-toy"):
        registry.register(Entry("another", formats=(FORMAT,)))


def test_register_places_a_family_and_unregister_takes_it_out():
    table = registry.FAMILIES
    registry.register(Entry("early", formats=("x-early/1",)), before="v2")
    try:
        names = [e.name for e in registry.FAMILIES]
        assert names.index("early") == names.index("v2") - 1
        assert registry.formats()["x-early/1"] == "early"
    finally:
        registry.unregister("early")
    assert registry.FAMILIES == table
    with pytest.raises(ValueError, match="^family: expected one of"):
        registry.unregister("early")


def test_the_engine_opens_the_family_through_the_registry(engine):
    assert isinstance(engine.family, ToyFamily) and engine.family.name == "example-toy"
    assert engine.voices == ["ada", "bo"] and engine.languages == ["en"]
    assert engine.sample_rate == 8000 and engine.frame_rate == 20.0


def test_a_stream_alone_equals_generate(idle):
    h = idle.submit(SpeechRequest(SHORT, seed=11, voice="bo"))
    got = codes(h)
    np.testing.assert_array_equal(got, reference(idle, SHORT, 11, speaker="bo"))
    assert h.frames == len(got) and got.shape[1] == G


def test_streams_that_join_and_leave_each_equal_generate(idle):
    """A long stream runs while shorter ones join at later steps and leave before it ends;
    one of them at another speed and sampling law: every stream's codes are its own."""
    hold = idle.fault
    long = idle.submit(SpeechRequest(LONG, seed=1))
    try:
        assert hold.reached.wait(timeout=60)  # the long stream is at its frame 3
        short = [
            idle.submit(SpeechRequest(SHORT, seed=20, voice="bo")),
            idle.submit(SpeechRequest(SHORT, seed=21, speed=1.5, temperature=1.2, top_k=4)),
        ]
        hold.release.set()  # they join at the next step
        got = [codes(h) for h in short]
        np.testing.assert_array_equal(got[0], reference(idle, SHORT, 20, speaker="bo"))
        law = codecspec.SamplingParams(1.2, 4, 1.0)
        np.testing.assert_array_equal(got[1], reference(idle, SHORT, 21, speed=1.5, params=law))
        np.testing.assert_array_equal(codes(long), reference(idle, LONG, 1))
        assert max(h.done_at for h in short) < long.done_at
        assert idle.family.calls < idle.family.lane_calls  # steps were batched
    finally:
        cancel_all(idle)


def test_the_speech_endpoint_serves_the_family(registered, folder):
    """POST /v1/audio/speech -> Engine -> ToyFamily.step -> the app's chunked vocoding: the
    WAV is the codec's audio of the codes `generate` gives, sample for sample."""
    httpx = pytest.importorskip("httpx")
    from codecspec.serve.audio import pcm16, wav_header

    factory = lambda: Engine(str(folder), max_streams=2, max_queue=2, threads=1)  # noqa: E731
    with LocalServer(factory) as server:
        body = {"model": "codecspec-example-toy", "input": LONG, "voice": "ada", "seed": 7}
        body["response_format"] = "wav"  # the model's own rate, 16-bit: compared exactly
        r = httpx.post(server.url + "/v1/audio/speech", json=body, timeout=120)
        assert r.status_code == 200, r.text
        tts = server.engine.tts
        ref = tts.generate(LONG, speaker="ada", seed=7)
        assert int(r.headers["X-Codecspec-Frames"]) == len(ref.codes)
        assert r.content == wav_header(len(ref.wav), ref.sample_rate) + pcm16(ref.wav)


def test_no_module_of_the_package_names_the_example_family():
    """Shared code untouched: the family exists only in its package and its tests."""
    package = Path(codecspec.__file__).resolve().parent
    named = [
        p.relative_to(package)
        for p in package.rglob("*.py")
        if any(w in p.read_text(encoding="utf-8") for w in ("example_family", "example-toy"))
    ]
    assert named == []


def test_bench_of_a_family_without_bench_keys_runs_the_protocols(registered, folder, capsys):
    """The example family has no bench figures of its own (`Family.bench_keys` and
    `bench_figures` None): `codecspec bench` measures it through the protocol
    (tests/pipeline/test_pipeline_bench.py checks the figures) instead of calling None; a bad
    argument is still one error line naming it."""
    from codecspec.cli import main

    engine = ENTRY.load("engine")
    assert engine.bench_keys is None and engine.bench_figures is None
    assert main(["bench", "--model", str(folder), "--texts", "1", "--provider", "cpu"]) == 0
    assert "example-toy" in capsys.readouterr().out
    assert main(["bench", "--model", str(folder), "--texts", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("--texts: expected an integer >= 1, got 0")


# ---------------------------------------------------------------- an installed plugin
def _installed(where: Path, name: str, value: str) -> Path:
    """A distribution's metadata as pip leaves it in site-packages: `name` declares the
    entry point `value` in the group codecspec.families."""
    info = where / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{name} = {value}\n")
    return where


@pytest.fixture
def fresh_table(monkeypatch):
    """A process that has not looked a family up yet and has not registered the toy (the
    module's other tests have); the table is restored afterwards."""
    monkeypatch.setattr(registry, "_discovered", False)
    table = tuple(e for e in registry.FAMILIES if e.name != ENTRY.name)
    monkeypatch.setattr(registry, "FAMILIES", table)


def test_an_installed_package_adds_its_family_through_an_entry_point(
    fresh_table, monkeypatch, tmp_path, folder
):
    """No register() call: the first lookup finds the plugin's Entry, and the folder opens."""
    monkeypatch.syspath_prepend(str(_installed(tmp_path, "toy-plugin", "example_family:ENTRY")))
    assert "example-toy" not in [e.name for e in registry.FAMILIES]
    entry = registry.family_of(str(folder))
    assert entry is ENTRY
    assert registry.discover() == []  # once per process
    assert isinstance(entry.load("model")(str(folder)), ToyTTS)


def test_a_broken_plugin_is_skipped_and_named(fresh_table, monkeypatch, tmp_path):
    for name, value in (
        ("gone-plugin", "no_such_module_xyz:ENTRY"),
        ("odd-plugin", "example_family:FORMAT"),
    ):
        (tmp_path / name).mkdir()
        monkeypatch.syspath_prepend(str(_installed(tmp_path / name, name, value)))
    with pytest.warns(UserWarning) as caught:
        added = registry.discover()
    assert added == []
    said = " ".join(str(w.message) for w in caught)
    assert "gone-plugin" in said and "odd-plugin" in said and "not a registry Entry" in said
    assert registry.by_name("v2").name == "v2"  # the built-in families still answer
