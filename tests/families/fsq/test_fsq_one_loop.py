"""FSQ's `generate` and `stream` run the serving engine's loop with one slot, inline
(`codecspec.pipeline.loop.run_inline`); the frame loop they replaced (`FSQTTS.stepper` +
`run_frame_loop`, kept as the oracle in tests/frame_loop_oracle.py) gives bit-identical codes,
lengths and stop decisions: sampled and greedy, several seeds and voices, ended by the stop
head or by a max_frames guard. IPA input: no espeak-ng needed."""

from __future__ import annotations

import numpy as np
import pytest
from frame_loop_oracle import FSQDecoder, run_frame_loop
from serve_util import HELLO, LONG

import codecspec as cs
from codecspec.families.fsq.model import FSQ_FILES, FSQTTS, default_fsq_dir

pytestmark = pytest.mark.skipif(
    not all((default_fsq_dir() / f).is_file() for f in FSQ_FILES), reason="no shipped FSQ model"
)


@pytest.fixture(scope="module")
def tts():
    return FSQTTS(provider="cpu", threads=1)


def old_loop(tts, text, seed, speaker=None, max_frames=None, params=None):
    """The frame loop `generate` ran before it became the engine's (the oracle)."""
    lang, spk = tts.ids("en", speaker)
    _, ids = tts.tokens("", text, "en")
    guard = tts.max_frames_for(len(ids)) if max_frames is None else max_frames
    dec = tts.frame_decoder
    if params is not None:
        dec = type(dec)(tts.codec.cfg.channel_levels, params)
    stepper = tts.stepper([ids], [lang], [spk], guard)
    loop = run_frame_loop(stepper, FSQDecoder(dec), cs.Generator(seed), guard)
    return loop.codes[0], bool(loop.stopped[0]), loop.steps


@pytest.mark.parametrize(
    "text,seed,speaker",
    [(HELLO, 0, None), (HELLO, 11, "f2"), (HELLO, 12345, "m3"), (LONG, 5, "m3"), (LONG, 7, None)],
)
def test_generate_equals_the_old_frame_loop(tts, text, seed, speaker):
    got = tts.generate("", phonemes=text, seed=seed, speaker=speaker, decode_audio=False)
    codes, stopped, steps = old_loop(tts, text, seed, speaker)
    assert got.codes.dtype == np.int64 and got.codes.shape == codes.shape
    np.testing.assert_array_equal(got.codes, codes)
    assert (got.stopped, got.graph_calls) == (stopped, steps)
    assert got.temporal_seconds > 0 and got.sampling_seconds > 0


@pytest.mark.parametrize("guard", [1, 2, 9])
def test_a_max_frames_guard_ends_it_as_the_old_loop_did(tts, guard):
    got = tts.generate("", phonemes=LONG, seed=3, max_frames=guard, decode_audio=False)
    codes, stopped, _ = old_loop(tts, LONG, 3, max_frames=guard)
    np.testing.assert_array_equal(got.codes, codes)
    assert len(got.codes) == guard and got.stopped == stopped is False


def test_greedy_equals_the_old_frame_loop(tts):
    greedy = cs.SamplingParams(0.0, 0, 1.0)
    model = FSQTTS(provider="cpu", threads=1, params=greedy)
    got = model.generate("", phonemes=HELLO, seed=4, decode_audio=False)
    codes, stopped, _ = old_loop(model, HELLO, 9, params=greedy)
    np.testing.assert_array_equal(got.codes, codes)
    assert got.stopped == stopped


def test_stream_gives_generates_codes(tts):
    ref = tts.generate("", phonemes=HELLO, seed=21, decode_audio=False)
    s = tts.stream("", phonemes=HELLO, seed=21, chunk_frames=4)
    audio = np.concatenate(list(s))
    np.testing.assert_array_equal(s.codes, ref.codes)
    assert s.stopped == ref.stopped and s.frames == len(ref.codes) and len(audio) > 0


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_a_bad_guard_is_refused_at_the_call(tts, bad):
    with pytest.raises(ValueError, match="max_frames"):
        tts.generate("", phonemes=HELLO, max_frames=bad, decode_audio=False)
