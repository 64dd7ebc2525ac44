"""Reference models v2 and v3: `generate` and `stream` run the serving engine's loop with one
slot, inline (`codecspec.pipeline.loop.run_inline` over a one-slot `V2Family`); the round loop they
replaced (`TemporalLoop.frames`, kept as the oracle: tests/v2_oracle.py) gives bit-identical
codes, lengths and stop decisions: temporal AR and speculative, depth AR, speculative and pcg,
several seeds, ended by the stop head or by a max_frames guard."""

from __future__ import annotations

import numpy as np
import pytest
from serve_util import HELLO, LONG
from v2_oracle import round_frames

import codecspec as cs
from codecspec.families.v2.model import V2TTS, default_v2_dir, default_v3_dir

TEXT = "Hello world. This is a test."


@pytest.fixture(scope="module")
def v2():
    if not (default_v2_dir() / "model.json").is_file():
        pytest.skip("no v2 model folder")
    return V2TTS(provider="cpu", threads=1)


@pytest.fixture(scope="module")
def v3():
    if not (default_v3_dir() / "model.json").is_file():
        pytest.skip("no shipped v3 model")
    return V2TTS(default_v3_dir(), provider="cpu", threads=1)


def old_loop(tts, text, phonemes, seed, mode, temporal, max_frames=None, **kw):
    """The round loop `generate` ran before it became the engine's (the oracle)."""
    _, ids, _, spk, enc, track = tts.prepare_text(text, phonemes, "en", None)
    expected = tts.expected_frames(len(ids) - 2, "en") if track is None else track
    guard = tts.max_frames_for(expected) if max_frames is None else max_frames
    loop = tts.temporal_loop(enc, spk, expected, temporal=temporal, depth_mode=mode, **kw)
    batch_depth = tts.round_depth(loop.draft_len + 1)  # the old loop's, for rounds of 2+
    frames = list(round_frames(loop, cs.Generator(seed), guard, batch_depth))
    return np.stack([c for c, _, _ in frames]), bool(frames[-1][1]), loop.stats


def check(tts, seed, mode, temporal, text="", phonemes=None, **kw):
    got = tts.generate(
        text,
        phonemes=phonemes,
        seed=seed,
        mode=mode,
        temporal=temporal,
        decode_audio=False,
        **kw,
    )
    codes, stopped, stats = old_loop(tts, text, phonemes, seed, mode, temporal, **kw)
    assert got.codes.shape == codes.shape, (got.codes.shape, codes.shape)
    np.testing.assert_array_equal(got.codes, codes)
    assert got.hit_max_frames == (not stopped)
    st = got.temporal_stats
    assert (st.rounds, st.accepted, st.drafted) == (stats.rounds, stats.accepted, stats.drafted)
    assert st.depth_seconds > 0 and got.temporal_seconds > 0
    return got


@pytest.mark.parametrize(
    "seed,mode,temporal,text",
    [
        (0, "ar", "ar", HELLO),
        (11, "spec", "ar", HELLO),
        (5, "ar", "spec", LONG),
        (12345, "spec", "spec", HELLO),
        (7, "pcg", "spec", HELLO),
    ],
)
def test_v2_generate_equals_the_old_round_loop(v2, seed, mode, temporal, text):
    check(v2, seed, mode, temporal, phonemes=text)


def test_v2_lossy_acceptance_and_longer_drafts_equal_the_old_round_loop(v2):
    check(v2, 3, "ar", "spec", phonemes=LONG, accept="ssd", draft_len=5)


@pytest.mark.parametrize("guard,temporal", [(1, "ar"), (4, "spec"), (9, "spec")])
def test_v2_a_max_frames_guard_ends_it_as_the_old_loop_did(v2, guard, temporal):
    got = check(v2, 2, "ar", temporal, phonemes=LONG, max_frames=guard)
    assert len(got.codes) == guard and got.hit_max_frames


@pytest.mark.parametrize("seed,mode,temporal", [(0, "ar", "ar"), (9, "spec", "spec")])
def test_v3_generate_equals_the_old_round_loop(v3, seed, mode, temporal):
    check(v3, seed, mode, temporal, text=TEXT)


def test_v2_stream_gives_generates_codes(v2):
    ref = v2.generate("", phonemes=HELLO, seed=21, temporal="spec", decode_audio=False)
    s = v2.stream("", phonemes=HELLO, seed=21, temporal="spec", chunk_frames=4)
    audio = np.concatenate(list(s))
    np.testing.assert_array_equal(s.codes, ref.codes)
    assert s.stopped == (not ref.hit_max_frames) and len(audio) > 0


@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_a_bad_guard_is_refused_at_the_call(v2, bad):
    with pytest.raises(ValueError, match="max_frames"):
        v2.generate("", phonemes=HELLO, max_frames=bad, decode_audio=False)
