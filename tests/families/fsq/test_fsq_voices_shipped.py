"""The shipped FSQ voice-prefix model (`fsq-voices`, issue 54): GEPARD's voice prefix on the
fsq-aligned network, a Q-Former that reads a reference clip once per request. On ONNX
Runtime, no torch: the folder says what it is, a clip of a voice reads as that voice,
streams in different voices (named, cloned, neutral) run together and keep their own codes,
the CLI and the engine take clips, and bad clips are refused naming the argument."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from tiny_fsq import assert_streams_keep_their_codes

from codecspec.codec.audio import write_wav
from codecspec.families.fsq.model import FSQ_FILES, FSQTTS
from codecspec.families.fsq.voice import NEUTRAL, VOICE_FILES
from codecspec.frontend import espeak
from codecspec.model_store import named_model_dir
from codecspec.pipeline.family import SpeechRequest
from codecspec.pipeline.registry import model_family

DIR = named_model_dir("fsq-voices")
pytestmark = pytest.mark.skipif(
    not all((DIR / f).is_file() for f in FSQ_FILES + VOICE_FILES),
    reason="no shipped fsq-voices model",
)
TEXT = "The quiet harbour wakes before the gulls do."
# a clip of a voice the model trained on, saying another text than its named voice's clip
CLIP_TEXT = "Nobody expected the museum to open its doors before the storm."


@pytest.fixture(scope="module")
def tts():
    return FSQTTS(DIR, provider="cpu", threads=1)


def _render(voice: str, pitch: int = 50):
    r = espeak.render(CLIP_TEXT, f"en-us+{voice}", 170, pitch, 0)
    return r.audio, r.sample_rate


def test_the_folder_is_small_and_says_what_it_is(tts):
    total = sum(p.stat().st_size for p in DIR.iterdir() if p.is_file())
    assert total <= 16 * 2**20, f"{total / 2**20:.1f} MiB shipped"  # 79 named voices: 0.7 MB
    meta = json.loads((DIR / "model.json").read_text())
    assert meta["config"]["voice_queries"] == 8 and meta["config"]["voice_blocks"] == 2
    assert meta["default_voice"] == NEUTRAL and tts.default_voice == NEUTRAL
    assert model_family("fsq-voices") == "fsq"
    assert tts.speakers[0] == NEUTRAL and set(tts.speakers[1:]) == set(tts.frontend.speakers.names)
    assert all(p.shape == (8, 256) for p in tts.voices.prefixes.values())


def test_a_clip_of_a_voice_reads_as_that_voice(tts):
    """A new clip of a training voice (another text) gives a prefix nearer to that voice's
    named prefix than to any other named voice's, for most voices (the Q-Former hears the
    voice, not the words); the same clip read twice gives the same prefix."""
    names = [n for n in tts.speakers if n != NEUTRAL]
    bank = np.stack([tts.voices.prefixes[n].ravel() for n in names])
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    voices = ["f1", "m3", "Alicia", "grandpa", "klatt", "Andy"]
    hits = 0
    for v in voices:
        p = tts.voices.clone(_render(v)).ravel()
        hits += names[int(np.argmax(bank @ (p / np.linalg.norm(p))))] == v
    assert hits >= len(voices) - 1, f"{hits} of {len(voices)} clips read as their own voice"
    clip = _render("m3")  # (espeak-ng's library may render a text a few samples apart)
    np.testing.assert_array_equal(tts.voices.clone(clip), tts.voices.clone(clip))


def test_streams_in_different_voices_together_keep_their_own_codes(tts):
    tts = FSQTTS(DIR, provider="cpu", threads=1, ref_audio=_render("Annie", 62))
    reqs = [SpeechRequest(TEXT, "text", v, "en") for v in ("ref", NEUTRAL, "m3")]
    batch = assert_streams_keep_their_codes(tts, reqs, seed=4)
    assert not np.array_equal(batch[0], batch[1])  # the clip's voice is not the neutral one


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "codecspec", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_synth_speaks_in_the_voice_of_a_clip(tmp_path):
    clip = tmp_path / "clip.wav"
    write_wav(clip, *_render("Annie", 62))
    r = _cli(
        "synth",
        "--model",
        "fsq-voices",
        "--ref-audio",
        str(clip),
        "--threads",
        "1",
        "-o",
        "out.wav",
        "--json",
        TEXT,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["audio_seconds"] > 1.0 and (tmp_path / "out.wav").is_file()


@pytest.mark.parametrize(
    "model,clip,match",
    [
        ("fsq-aligned", "clip.wav", "ref_audio: .* reads no reference clip"),
        ("fsq-voices", "missing.wav", "ref_audio: no such file"),
        ("v3", "clip.wav", "--ref-audio: only for"),
    ],
)
def test_synth_refuses_a_clip_it_cannot_read_in_one_line(tmp_path, model, clip, match):
    write_wav(tmp_path / "clip.wav", *_render("m3"))
    r = _cli("synth", "--model", model, "--ref-audio", clip, "-o", "out.wav", TEXT, cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert __import__("re").search(match, r.stderr), r.stderr


def test_the_engine_serves_the_voices_of_a_folder_of_clips(tmp_path):
    from serve_util import codes

    from codecspec.serve.engine import Engine

    write_wav(tmp_path / "harbour.wav", *_render("Annie", 62))
    e = Engine("fsq-voices", max_streams=2, max_queue=4, threads=1, voices_dir=str(tmp_path))
    try:
        assert "harbour" in e.voices and NEUTRAL in e.voices
        h = e.submit(SpeechRequest(TEXT, "text", "harbour", "en", seed=3))
        ref = e.tts.generate(TEXT, speaker="harbour", seed=3, decode_audio=False)
        np.testing.assert_array_equal(codes(h), ref.codes)
        with pytest.raises(ValueError, match="^voice: expected one of"):
            e.submit(SpeechRequest(TEXT, "text", "nobody", "en"))
    finally:
        e.shutdown()
