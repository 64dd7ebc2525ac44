"""`codecspec serve --model BASE_DIR --voices-dir DIR`: a Base checkpoint served with a folder
of voices (NAME.wav + NAME.txt), each encoded once at load and cloned in context; a request's
`voice` picks one. Uses the clone fixtures of tests/data/qwen3_clone (official greedy codes)
with the tiny 12 Hz decoder of tests/data/qwen3_tiny/custom_equal (same codebook) added.
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

from codecspec.families.qwen3_tts.engine import Qwen3Family  # noqa: E402
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS  # noqa: E402
from codecspec.serve.app import chunk_frames  # noqa: E402
from codecspec.serve.audio import pcm16  # noqa: E402
from codecspec.serve.engine import Engine, SpeechRequest  # noqa: E402

CLONE = DATA / "qwen3_clone"
TINY = DATA / "qwen3_tiny"


def _case(i: int) -> dict:
    return json.loads((CLONE / "base_icl.cases.json").read_text(encoding="utf-8"))[i]


def _official_codes(i: int) -> np.ndarray:
    return np.load(CLONE / "base_icl.fixtures.npz")[f"case_{i}_codes"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """base_icl with decoder weights beside its encoder's (a second safetensors file)."""
    d = tmp_path_factory.mktemp("voices_model") / "base_icl"
    shutil.copytree(CLONE / "base_icl", d)
    shutil.copy(
        TINY / "custom_equal" / "speech_tokenizer" / "model.safetensors",
        d / "speech_tokenizer" / "decoder.safetensors",
    )
    return d


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    """anna: case 0's clip and transcript; bert: case 1's."""
    d = tmp_path_factory.mktemp("voices")
    for name, i in (("anna", 0), ("bert", 1)):
        case = _case(i)
        shutil.copy(CLONE / f"{case['ref_audio']}.wav", d / f"{name}.wav")
        (d / f"{name}.txt").write_text(case["ref_text"] + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("voices_cache")


@pytest.fixture(scope="module")
def server(folder, voices, cache):
    def factory():
        return Engine(folder, max_streams=2, threads=1, cache_dir=cache, voices_dir=voices)

    with LocalServer(factory) as s:
        yield s


@pytest.fixture(scope="module")
def reference(folder, cache):
    return Qwen3TTS.load(folder, cache_dir=cache, threads=1)


@pytest.fixture(autouse=True)
def idle_after(request):
    yield
    if "server" in request.fixturenames:
        assert_idle(request.getfixturevalue("server").engine)


def post(server, **body):
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=120)


def test_voices_are_the_folders_names(server):
    assert server.engine.voices == ["anna", "bert"]


@pytest.mark.parametrize("voice,i", [("anna", 0), ("bert", 1)])
def test_a_voice_clones_in_context_as_the_official_code(server, voice, i):
    case = _case(i)
    lang = case["language"]
    req = SpeechRequest(case["text"], voice=voice, language=lang, temperature=0, mode="ar")
    assert np.array_equal(codes(server.engine.submit(req)), _official_codes(i))


def test_voices_are_encoded_once_at_load(server, monkeypatch):
    """Requests use the voices prepared at load: reading or encoding a clip again fails."""

    def refuse(*a, **k):
        raise AssertionError("a voice was encoded again")

    for name in ("reference_codes", "speaker_vector", "clone_voice"):
        monkeypatch.setattr(Qwen3TTS, name, refuse)
    case = _case(0)
    req = SpeechRequest(case["text"], voice="anna", language=case["language"], temperature=0)
    assert np.array_equal(codes(server.engine.submit(req)), _official_codes(0))


def test_unknown_voice_is_a_400_listing_the_voices(server):
    r = post(server, input="Hello.", voice="nobody")
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == "voice"
    assert "'anna'" in err["message"] and "'bert'" in err["message"]


def test_audio_is_decoded_after_the_voices_reference(server, reference):
    """The served audio continues the reference clip's codes (the decoder's left context),
    as the official generate_voice_clone decodes it; chunked as the app sends it."""
    case = _case(1)
    r = post(
        server,
        input=case["text"],
        voice="bert",
        language=case["language"],
        temperature=0,
        response_format="wav",
    )
    assert r.status_code == 200, r.text
    with wave.open(io.BytesIO(r.content)) as w:
        got = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    frames = _official_codes(1)
    stream = reference.speech_decoder().open_stream()
    stream.feed(reference.reference_codes(CLONE / f"{case['ref_audio']}.wav"))
    parts, sent = [], 0
    while sent < len(frames):
        n = chunk_frames(sent, Qwen3Family.first_chunk_frames)
        parts.append(stream.feed(frames[sent : sent + n]))
        sent += n
    want = np.frombuffer(pcm16(np.concatenate(parts)), "<i2")
    assert np.array_equal(got, want)


# ---------------------------------------------------------------------- refusals
def _bad_dir(tmp_path, files: dict) -> Path:
    d = tmp_path / "bad"
    d.mkdir()
    for name, content in files.items():
        if name.endswith(".wav"):
            shutil.copy(CLONE / "ref_a.wav", d / name)
        else:
            (d / name).write_text(content, encoding="utf-8")
    return d


@pytest.mark.parametrize(
    "files,match",
    [
        ({"anna.wav": None}, "unpaired: \\['anna'\\]"),
        ({"anna.wav": None, "anna.txt": " \n"}, "is empty"),
        ({}, "holds no voice"),
    ],
)
def test_a_bad_voices_folder_is_refused_before_building(folder, tmp_path, files, match):
    from codecspec.families.qwen3_tts.engine import check_folder

    with pytest.raises(ValueError, match=f"^voices_dir: .*{match}"):
        check_folder(folder, voices_dir=_bad_dir(tmp_path, files))


def test_voices_dir_needs_a_base_checkpoint_and_excludes_ref_audio(folder, voices):
    from codecspec.families.qwen3_tts.engine import check_folder

    with pytest.raises(ValueError, match="^voices_dir: a custom_voice checkpoint"):
        check_folder(TINY / "custom_equal", voices_dir=voices)
    with pytest.raises(ValueError, match="^voices_dir: give it or ref_audio"):
        check_folder(folder, ref_audio=CLONE / "ref_a.wav", voices_dir=voices)


def test_serve_command_refuses_voices_dir_for_other_models(voices, capsys):
    from codecspec.cli import main

    assert main(["serve", "--model", "v3", "--voices-dir", str(voices)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--voices-dir" in err and "\n" not in err
