"""An FSQ model trained the v3 way (issue 54): told espeak-ng's phoneme track, over a codec
whose levels differ per group. A tiny random folder (the [train] extra builds it; espeak-ng
times the text) must run `generate` through the engine's one loop exactly as the frame loop
over the exported graphs does when fed the same track, the past-the-end position included:
codes, lengths and stop decisions identical. It reads text only (the track needs it)."""

from __future__ import annotations

import numpy as np
import pytest
from frame_loop_oracle import FSQDecoder, run_frame_loop
from tiny_fsq import aligned_folder

torch = pytest.importorskip("torch", reason="builds a tiny folder with the [train] extra")

import codecspec as cs  # noqa: E402
from codecspec.families.fsq.model import FSQTTS  # noqa: E402
from codecspec.families.fsq.torch_model import FSQTemporalModel  # noqa: E402
from codecspec.frontend.aligned import past_end_position  # noqa: E402

TEXT = "Quiet ships sail at dawn."


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random aligned FSQ folder with v3's text side (mnemonics, four voices)."""
    d = tmp_path_factory.mktemp("fsq_aligned")

    def build(cfg):
        tm = FSQTemporalModel(cfg).eval()
        with torch.no_grad():  # a stop head that rarely fires: frames past the end
            tm.decoder.c0_head.bias[-1] = -4.0
        return tm

    aligned_folder(d, build, num_speakers=4)
    return d


@pytest.fixture(scope="module")
def tts(folder):
    return FSQTTS(folder, provider="cpu", threads=1)


def _oracle(tts, text, seed, speaker=None, max_frames=None):
    """The frame loop over the exported graphs, fed the track by hand."""
    mnemonics, track = tts.phoneme_track(text, "en", speaker)
    _, ids = tts.tokens(None, mnemonics, "en")
    guard = tts.max_frames_for(len(ids), track) if max_frames is None else max_frames
    lang, spk = tts.ids("en", speaker)
    stepper = tts.stepper([ids], [lang], [spk], guard, tracks=[track])
    loop = run_frame_loop(stepper, FSQDecoder(tts.frame_decoder), cs.Generator(seed), guard)
    return loop.codes[0], bool(loop.stopped[0]), len(track)


@pytest.mark.parametrize("seed,speaker", [(0, None), (3, "m3"), (11, "f2")])
def test_generate_follows_the_track_as_the_frame_loop_does(tts, seed, speaker):
    got = tts.generate(TEXT, seed=seed, speaker=speaker, decode_audio=False)
    codes, stopped, track_frames = _oracle(tts, TEXT, seed, speaker)
    np.testing.assert_array_equal(got.codes, codes)
    assert got.stopped == stopped
    assert got.codes.shape[1] == tts.codec.cfg.channels


def test_frames_past_the_track_read_the_past_end_position(tts):
    """A guard past the track's end: both loops run frames beyond it, and those frames read
    `past_end_position` (a track written out with it gives the same logits; one that moves
    on past the end, the broken variant, does not)."""
    _, _, n = _oracle(tts, TEXT, 0)
    got = tts.generate(TEXT, seed=5, max_frames=n + 6, decode_audio=False)
    codes, _, _ = _oracle(tts, TEXT, 5, max_frames=n + 6)
    np.testing.assert_array_equal(got.codes, codes)
    mnemonics, track = tts.phoneme_track(TEXT, "en", None)
    _, ids = tts.tokens(None, mnemonics, "en")
    end = past_end_position(track, len(ids) - 2)
    written = np.concatenate([track, np.full(8, end, np.float32)])
    lang, spk = tts.ids("en", None)

    def logits(tracks):
        st = tts.stepper([ids], [lang], [spk], n + 8, tracks=tracks)
        return [st.step(codes[t - 1 : t] if t else None)[1] for t in range(len(codes))]

    ref = logits([track])
    assert all(np.array_equal(a, b) for a, b in zip(ref, logits([written])))
    moved = logits([np.concatenate([track, end + 1.0 + np.arange(8, dtype=np.float32)])])
    same = [np.array_equal(a, b) for a, b in zip(ref, moved)]
    assert all(same[:n]) and not any(same[n:])


def test_an_aligned_model_reads_text_not_phonemes(tts):
    with pytest.raises(ValueError, match="phonemes"):
        tts.generate("", phonemes="h @ l oU", decode_audio=False)
