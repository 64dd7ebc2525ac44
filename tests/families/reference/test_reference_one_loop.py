"""The RVQ reference (v1): `generate` and `stream` run the serving engine's loop with one slot,
inline (`codecspec.pipeline.loop.run_inline` over a one-slot `ReferenceFamily`); the frame loop they
replaced (`SlotStepper` + `RVQStepper` + `RVQFrameDecoder` through `run_frame_loop`, kept as
the oracle in tests/reference_oracle.py and tests/frame_loop_oracle.py) gives bit-identical
codes and lengths, depth AR and speculative, several seeds and voices, greedy too. IPA input:
no espeak-ng needed."""

from __future__ import annotations

import numpy as np
import pytest
from frame_loop_oracle import run_frame_loop
from reference_oracle import old_parts

import codecspec as cs
from codecspec.families.reference.model import MODEL_FILES, ReferenceTTS, default_model_dir

pytestmark = pytest.mark.skipif(
    not all((default_model_dir() / f).is_file() for f in MODEL_FILES),
    reason="no shipped reference model",
)
HELLO = "hˈɛloʊ wˈɜːld"
LONG = "ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ nˌɪɹ ðə ɹˈɪvɚ bˈæŋk"


@pytest.fixture(scope="module")
def tts():
    return ReferenceTTS(provider="cpu", threads=1)


def old_loop(tts, phonemes, seed, mode, speaker=None):
    """The old frame loop's codes (the oracle)."""
    stepper, dec = old_parts(tts, phonemes, mode, speaker)
    return run_frame_loop(stepper, dec, cs.Generator(seed), dec.frames).codes[0]


@pytest.mark.parametrize(
    "text,seed,mode,speaker",
    [
        (HELLO, 0, "ar", None),
        (HELLO, 11, "spec", None),
        (LONG, 5, "ar", "m3"),
        (LONG, 12345, "spec", "f2"),
    ],
)
def test_generate_equals_the_old_frame_loop(tts, text, seed, mode, speaker):
    got = tts.generate("", phonemes=text, seed=seed, mode=mode, speaker=speaker, decode_audio=False)
    want = old_loop(tts, text, seed, mode, speaker)
    assert got.codes.dtype == np.int64 and got.codes.shape == want.shape
    np.testing.assert_array_equal(got.codes, want)
    assert got.mode == mode and got.depth_calls > 0 and got.depth_seconds > 0


def test_greedy_equals_the_old_frame_loop():
    model = ReferenceTTS(provider="cpu", threads=1, params=cs.SamplingParams(0.0, 0, 1.0))
    got = model.generate("", phonemes=HELLO, seed=3, mode="spec", decode_audio=False)
    np.testing.assert_array_equal(got.codes, old_loop(model, HELLO, 3, "spec"))


def test_stream_gives_generates_codes(tts):
    ref = tts.generate("", phonemes=LONG, seed=21, mode="spec", decode_audio=False)
    s = tts.stream("", phonemes=LONG, seed=21, mode="spec", chunk_frames=4)
    audio = np.concatenate(list(s))
    np.testing.assert_array_equal(s.codes, ref.codes)
    assert s.stopped and s.frames == len(ref.codes) and len(audio) > 0
