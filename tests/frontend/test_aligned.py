"""The aligned model's conditioning: espeak-ng's phoneme timing and the phoneme track."""

import numpy as np
import pytest

from codecspec.frontend.aligned import FIRST_PHONEME, phoneme_track, track_frames
from codecspec.frontend.text import PhonemeVocab


def test_track_follows_the_phoneme_at_each_frame_centre():
    # phonemes at 0, 100, 250 ms, ending at 400 ms; frames of 80 ms: centres 40, 120, 200, 280, 360
    u = phoneme_track([0.0, 100.0, 250.0], 400.0, 80.0)
    assert u.dtype == np.float32 and len(u) == track_frames(400.0, 80.0) == 5
    np.testing.assert_allclose(
        u - FIRST_PHONEME,
        [0.4, 1 + 20 / 150, 1 + 100 / 150, 2 + 30 / 150, 2 + 110 / 150],
        atol=1e-6,
    )
    assert np.all(np.diff(u) > 0)


def test_zero_length_phonemes_are_skipped_and_the_end_is_clamped():
    u = phoneme_track([0.0, 100.0, 100.0, 200.0], 240.0, 80.0, frames=6)
    idx = np.floor(u).astype(int) - FIRST_PHONEME
    assert 1 not in idx  # the phoneme of zero length never holds a frame centre
    assert np.all(u < FIRST_PHONEME + 4) and u[-1] == u[-2]  # past the end: the last phoneme


@pytest.mark.parametrize(
    "args, name",
    [
        (([], 10.0, 80.0), "starts_ms"),
        (([0.0, 50.0, 20.0], 100.0, 80.0), "starts_ms"),
        (([0.0, 50.0], 10.0, 80.0), "end_ms"),
        (([0.0], 10.0, 0.0), "frame_ms"),
    ],
)
def test_bad_tracks_name_the_argument(args, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        phoneme_track(*args)


def test_mnemonic_vocabulary_round_trips():
    v = PhonemeVocab.from_strings(["h @ l oU", "w 3: l d _:"], kind="mnemonic")
    assert "oU" in v and "3:" in v and "o" not in v
    ids = v.encode("h @ l oU w 3: l d")
    assert v.decode(ids) == "h @ l oU w 3: l d"
    assert PhonemeVocab.from_dict(v.to_dict()) == v
    assert PhonemeVocab.from_dict(v.to_dict()) != PhonemeVocab(v.symbols)  # kind matters


def test_espeak_library_times_every_phoneme():
    espeak = pytest.importorskip("codecspec.frontend.espeak")
    if not espeak.available():
        pytest.skip("libespeak-ng.so.1 is not installed (apt-get install espeak-ng)")
    r = espeak.render("Hello world, this is a test.", "en-us+f1", 170, 50)
    assert r.sample_rate > 0 and r.audio.dtype == np.float32 and r.audio.size > r.sample_rate
    assert r.phonemes[:4] == ("h", "@", "l", "oU")
    assert np.all(np.diff(r.starts_ms) >= 0) and r.end_ms >= r.starts_ms[-1]
    assert r.end_ms == pytest.approx(1000.0 * r.audio.size / r.sample_rate, abs=1.0)
    slow = espeak.render("Hello world, this is a test.", "en-us+f1", 100, 50)
    assert slow.end_ms > 1.3 * r.end_ms  # the rate reaches the library
    with pytest.raises(ValueError, match=r"^rate\b"):
        espeak.render("Hello", "en-us", 20)
    with pytest.raises(ValueError, match=r"^voice\b"):
        espeak.render("Hello", "no-such-voice-xx")
    with pytest.raises(ValueError, match=r"^text\b"):
        espeak.render("  ", "en-us")


def test_the_library_comes_from_the_espeakng_loader_wheel():
    """`pip install codecspec` brings espeak-ng: the wheel's library is found first."""
    import espeakng_loader

    from codecspec.frontend import espeak

    info = espeak.library_info()
    assert info["path"] == espeakng_loader.get_library_path()
    assert info["version"].startswith("1.")


def test_stress_marks_of_newer_libraries_are_stripped_from_phoneme_events():
    from codecspec.frontend.espeak import _rendering

    events = [("h", 0), ("@", 40), ("l", 90), ("'oU", 130), (",o@", 200), ("_:", 260)]
    r = _rendering("hello", np.zeros(0, np.float32), 22050, 22050 // 2, events)
    assert r.phonemes == ("h", "@", "l", "oU", "o@", "_:")


def test_every_evaluation_sentence_speaks_only_phonemes_the_default_model_knows():
    """The library's mnemonics must be the vocabulary v3 was trained on (espeak-ng 1.52's
    stressed events, unstripped, fell outside it and cost most of the words)."""
    from codecspec.evaluation import intelligibility as intel
    from codecspec.pipeline.registry import load_model

    tts = load_model("v3")
    for row in intel.resolve_sentences(30):
        phonemes, _ = tts.phoneme_track(row["text"], "en", None)
        tts.frontend.vocab.encode(phonemes, strict=True)  # ValueError names unknown tokens


def test_a_foreign_mnemonic_is_caught_by_the_vocabulary_check():
    from codecspec.pipeline.registry import load_model

    vocab = load_model("v3").frontend.vocab
    with pytest.raises(ValueError, match="not in the vocabulary"):
        vocab.encode("h @ l 'oU", strict=True)


def test_phonemize_without_the_command_line_tool_asks_the_library(monkeypatch):
    """A fresh machine has the espeakng-loader wheel's library but no espeak-ng program: the
    IPA-input models (v1, fsq) phonemize through the library."""
    from codecspec.frontend import espeak, phonemes

    monkeypatch.setattr(phonemes.shutil, "which", lambda name: None)
    got = phonemes.phonemize("Hello world. How are you?", "en-us")
    assert got == espeak.ipa("Hello world. How are you?", "en-us")
    assert got.count(" | ") == 1 and "wˈɜːld" in got  # two clauses, IPA with stress marks
    with pytest.raises(ValueError, match="^voice"):
        phonemes.phonemize("Hello", "no-such-voice-xx")


def test_the_library_speaks_the_command_line_tools_ipa_at_the_same_version():
    """espeak_TextToPhonemes and `espeak-ng -q -x --ipa` are one phonemizer: with the system's
    library (the tool's own version) the strings are equal on every evaluation sentence."""
    import ctypes.util
    import json
    import os
    import shutil
    import subprocess
    import sys

    from codecspec.evaluation import intelligibility as intel
    from codecspec.frontend.phonemes import phonemize

    system = ctypes.util.find_library("espeak-ng")
    assert system and shutil.which("espeak-ng"), ".ci/run installs espeak-ng for this test"
    texts = [r["text"] for r in intel.resolve_sentences(12)] + ["It costs $42.50, doesn't it?"]
    code = (
        "import json, sys\nfrom codecspec.frontend import espeak\n"
        "print(json.dumps([espeak.ipa(t, 'en-us') for t in json.loads(sys.stdin.read())]))"
    )
    env = dict(os.environ, CODECSPEC_ESPEAK_LIBRARY=system)  # a process of its own: one library
    out = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(texts).encode(), env=env, capture_output=True
    )
    assert out.returncode == 0, out.stderr.decode()[-500:]
    assert json.loads(out.stdout) == [phonemize(t, "en-us") for t in texts]


def test_frames_past_the_end_sit_in_the_closing_pause():
    """A track whose last frame is inside the last spoken phoneme moves on to the closing
    pause past its end; one already there stays (never backwards)."""
    from codecspec.frontend.aligned import past_end_position

    # 4 phonemes, the last (the pause) starting at 290 ms, the last frame centre at 280 ms
    inside = phoneme_track([0.0, 80.0, 160.0, 290.0], 297.0, 80.0)
    assert inside[-1] < FIRST_PHONEME + 3 <= past_end_position(inside, 4)
    beyond = phoneme_track([0.0, 80.0, 160.0, 200.0], 207.0, 80.0)
    assert past_end_position(beyond, 4) == beyond[-1] >= FIRST_PHONEME + 3
    with pytest.raises(ValueError, match="phonemes"):
        past_end_position(inside, 0)
