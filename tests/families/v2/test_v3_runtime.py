"""The aligned model's runtime without torch, on the checked-in tiny v3 folder
(tests/data/tiny_v3, written by `python tests/tiny_v3.py`: window 4, peaked laws, a stop head
that fires with probability ~5% per frame). Needs espeak-ng's library for the phoneme track."""

import numpy as np
import pytest
from paths import DATA

import codecspec as cs
from codecspec.codec.codec import Codec
from codecspec.families.v2.model import V2TTS
from codecspec.frontend import espeak
from codecspec.frontend.aligned import FIRST_PHONEME

FIXTURE = DATA / "tiny_v3"
TEXT = "Hello world, a big feel."

pytestmark = pytest.mark.skipif(
    not espeak.available(), reason="libespeak-ng.so.1 is not installed (apt-get install espeak-ng)"
)


@pytest.fixture(scope="module")
def tts():
    return V2TTS(FIXTURE, provider="cpu", threads=1)


def test_an_aligned_folder_speaks_through_the_v1_codec(tts):
    assert tts.aligned and isinstance(tts.codec, Codec)
    phonemes, track = tts.phoneme_track(TEXT, "en", None)
    assert phonemes.split()[:4] == ["h", "@", "l", "oU"]
    n = len(phonemes.split())
    assert track[0] >= FIRST_PHONEME and track[-1] < FIRST_PHONEME + n
    assert np.all(np.diff(track) >= 0)
    s = tts.generate(TEXT, mode="ar", temporal="ar", seed=3)
    assert s.codes.shape[1] == 16 and s.phonemes == phonemes
    assert len(s.wav) == len(s.codes) * tts.codec.cfg.frame_hop
    assert s.max_frames == tts.max_frames_for(track)


def test_the_step_graph_reads_the_track_frame_by_frame(tts):
    """Each frame's `progress` feed is the track's value at that frame (past its end: the
    closing pause, the last phoneme's start), and the graph's output depends on it (the
    cross-attention prior)."""
    _, ids, _, spk, enc = tts.encode_text(TEXT, None, "en", None)
    track = np.array([1.2, 1.7, 2.5, 4.1], np.float32)
    st = tts.stepper(enc, spk, track)
    feeds = []
    run = st.session.run
    st.session = type("Spy", (), {"run": lambda _, o, f: feeds.append(dict(f)) or run(o, f)})()
    for k in range(6):
        st.step(None if k == 0 else np.array([[k, 0]]))
    pause = np.float32(FIRST_PHONEME + len(ids) - 3)  # ids: bos, P phonemes, eos
    assert pause > track[-1]
    np.testing.assert_array_equal([f["progress"][0] for f in feeds], [*track, pause, pause])
    a = tts.stepper(enc, spk, np.array([1.5], np.float32)).score([tts.start_token])[1]
    b = tts.stepper(enc, spk, np.array([5.5], np.float32)).score([tts.start_token])[1]
    assert np.abs(a - b).max() > 1e-3  # another phoneme spoken: other logits


def test_rate_scales_the_track(tts):
    _, normal = tts.phoneme_track(TEXT, "en", None, rate=1.0)
    _, fast = tts.phoneme_track(TEXT, "en", None, rate=1.6)
    assert len(fast) < 0.8 * len(normal)


def test_greedy_speculation_gives_the_ar_codes(tts):
    """Temperature 0: exact temporal and depth speculation emit exactly the AR codes (up to
    where either ends: the stop head's Bernoulli draws come from other counters)."""
    saved = tts.params
    tts.params = tts.depth.params = cs.SamplingParams(0.0, 0, 1.0)
    try:
        runs = [
            tts.generate(TEXT, mode=m, temporal=t, seed=0, decode_audio=False, max_frames=30).codes
            for m, t in (("ar", "ar"), ("spec", "ar"), ("ar", "spec"), ("spec", "spec"))
        ]
    finally:
        tts.params = tts.depth.params = saved
    for r in runs[1:]:
        n = min(len(r), len(runs[0]))
        assert n >= 3
        np.testing.assert_array_equal(r[:n], runs[0][:n])


def test_streaming_gives_the_codes_generate_makes(tts):
    for kw in ({"mode": "ar"}, {"mode": "ar", "temporal": "spec", "draft_len": 2}):
        s = tts.generate(TEXT, seed=4, max_frames=12, decode_audio=False, **kw)
        st = tts.stream(TEXT, seed=4, max_frames=12, chunk_frames=4, **kw)
        chunks = list(st)
        np.testing.assert_array_equal(st.codes, s.codes)
        assert sum(len(c) for c in chunks) == len(s.codes) * tts.codec.cfg.frame_hop


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"phonemes": "h @ l oU"}, "phonemes"),
        ({"rate": 9.0}, "rate"),
        ({"speaker": "nobody"}, "speaker"),
        ({"language": "xx"}, "language"),
    ],
)
def test_bad_requests_name_the_argument(tts, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        tts.generate(TEXT, decode_audio=False, **kw)
