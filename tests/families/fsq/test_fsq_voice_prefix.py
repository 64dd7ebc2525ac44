"""An FSQ voice-prefix model (issue 54, GEPARD's voice prefix): a reference clip's channels
read by a Q-Former into K prefix vectors, once per request, fed to the encoder. A tiny
random folder (the [train] extra builds it) must give the torch model's prefix from the
exported voice graph, run `generate` in a voice exactly as the frame loop over the graphs
fed that voice's prefix does, and refuse what a stranger can get wrong, naming it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from frame_loop_oracle import FSQDecoder, run_frame_loop
from tiny_fsq import aligned_folder

torch = pytest.importorskip("torch", reason="builds a tiny folder with the [train] extra")

import codecspec as cs  # noqa: E402
from codecspec.codec.audio import write_wav  # noqa: E402
from codecspec.families.fsq.model import FSQTTS  # noqa: E402
from codecspec.families.fsq.torch_model import (  # noqa: E402
    FSQTemporalModel,
)
from codecspec.families.fsq.voice import NEUTRAL  # noqa: E402
from codecspec.model_store import named_model_dir  # noqa: E402

TEXT = "Quiet ships sail at dawn."
K = 4


def _clip(f0: float, seconds: float = 1.5, rate: int = 22050) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * f0 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def folder_and_model(tmp_path_factory):
    """A tiny random aligned FSQ folder with a voice prefix: neutral and one named voice."""
    d = tmp_path_factory.mktemp("fsq_voice")

    def build(cfg):
        tm = FSQTemporalModel(cfg).eval()
        with torch.no_grad():
            tm.decoder.c0_head.bias[-1] = -3.0  # a stop head that fires now and then
            tm.voice_speaker.weight.normal_(0.0, 0.5)  # a voice that moves the memory
        return tm

    codec, tm = aligned_folder(d, build, num_speakers=1, voice_queries=K, voice_blocks=2)
    with torch.no_grad():
        null = tm.voice.null.numpy()
        ones = torch.ones(1, 6, tm.fsq.channels, dtype=torch.long)
        named = tm.voice_prefix(ones, torch.tensor([6]))
    np.savez(d / "voices.npz", **{NEUTRAL: null, "m3": named[0].numpy()})
    meta = json.loads((d / "model.json").read_text())
    (d / "model.json").write_text(json.dumps(meta | {"default_voice": NEUTRAL}))
    return d, tm, codec


@pytest.fixture(scope="module")
def folder(folder_and_model):
    return folder_and_model[0]


@pytest.fixture(scope="module")
def tts(folder):
    return FSQTTS(folder, provider="cpu", threads=1)


def test_the_voice_graph_gives_the_torch_models_prefix(folder_and_model, tts):
    _, tm, codec = folder_and_model
    x = _clip(180.0)
    from codecspec.codec.audio import resample

    ch = codec.encode_features(codec.features(resample(x, 22050, codec.sample_rate)))
    with torch.no_grad():
        want = tm.voice_prefix(torch.from_numpy(ch[None].astype(np.int64)), torch.tensor([len(ch)]))
    got = tts.voices.clone((x, 22050))
    assert got.shape == (K, tm.fsq.d_model)
    np.testing.assert_allclose(got, want[0].numpy(), atol=2e-5)


def _oracle(tts, seed, voice):
    mnemonics, track = tts.phoneme_track(TEXT, "en", voice)
    _, ids = tts.tokens(None, mnemonics, "en")
    guard = tts.max_frames_for(len(ids), track)
    lang, spk = tts.ids("en", voice)
    st = tts.stepper([ids], [lang], [spk], guard, tracks=[track], voices=[voice])
    loop = run_frame_loop(st, FSQDecoder(tts.frame_decoder), cs.Generator(seed), guard)
    return loop.codes[0]


@pytest.mark.parametrize("seed,voice", [(0, None), (3, "m3"), (7, NEUTRAL)])
def test_generate_in_a_voice_is_the_frame_loop_fed_its_prefix(tts, seed, voice):
    got = tts.generate(TEXT, seed=seed, speaker=voice, decode_audio=False)
    np.testing.assert_array_equal(got.codes, _oracle(tts, seed, voice))


def test_the_prefix_reaches_the_model_and_the_step_graph_does_not_need_it(tts):
    """Two voices give other codes for the same text and seed (the broken variant, every
    request read with the neutral prefix, would not); the step graph has no prefix input."""
    a = tts.generate(TEXT, seed=2, speaker="m3", decode_audio=False).codes
    b = tts.generate(TEXT, seed=2, speaker=NEUTRAL, decode_audio=False).codes
    assert not np.array_equal(a, b)
    assert "prefix" not in [i.name for i in tts.step_graph.get_inputs()]
    assert "prefix" in [i.name for i in tts.encoder.get_inputs()]


def test_a_clip_becomes_the_default_voice_and_a_folder_of_clips_named_voices(folder, tmp_path):
    clip = tmp_path / "low.wav"
    write_wav(clip, _clip(110.0), 22050)
    voices = tmp_path / "voices"
    voices.mkdir()
    write_wav(voices / "high.wav", _clip(260.0), 16000)
    tts = FSQTTS(folder, provider="cpu", threads=1, ref_audio=clip, voices_dir=voices)
    assert tts.speakers == [NEUTRAL, "m3", "high", "ref"] and tts.default_voice == "ref"
    default = tts.generate(TEXT, seed=1, decode_audio=False).codes
    ref = tts.generate(TEXT, seed=1, speaker="ref", decode_audio=False).codes
    np.testing.assert_array_equal(default, ref)
    np.testing.assert_allclose(tts.voices.prefixes["ref"], tts.voices.clone(clip), atol=1e-6)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(ref_audio=(np.zeros(16000, np.float32), 16000)), "^ref_audio: the clip is silent"),
        (dict(ref_audio=(_clip(200.0, 0.2), 22050)), "^ref_audio: 0.20 s is too short"),
        (dict(ref_audio="no/such/clip.wav"), "^ref_audio: no such file"),
        (dict(ref_audio=(np.full(20000, np.nan, np.float32), 16000)), "^ref_audio: contains NaN"),
        (dict(ref_audio=(_clip(200.0), 0)), "^ref_audio: the sample rate"),
        (dict(voices_dir="no/such/folder"), "^voices_dir: .* is not a folder"),
    ],
)
def test_bad_clips_are_refused_naming_the_argument(folder, kw, match):
    with pytest.raises(ValueError, match=match):
        FSQTTS(folder, provider="cpu", threads=1, **kw)


def test_an_unknown_voice_is_refused_with_the_known_ones(tts):
    with pytest.raises(ValueError, match=r"^speaker: expected one of \['neutral', 'm3'"):
        tts.generate(TEXT, speaker="f1", decode_audio=False)


def test_a_folder_without_a_voice_prefix_refuses_a_clip():
    with pytest.raises(ValueError, match="^ref_audio: .* reads no reference clip"):
        FSQTTS(named_model_dir("fsq-aligned"), provider="cpu", threads=1, ref_audio="x.wav")
