"""In-context voice cloning (Base checkpoints, reference audio + its transcript) against the
official implementation's outputs.

tests/data/qwen3_clone/ comes from scripts/qwen3_clone_fixtures.py (official qwen-tts 0.1.1
classes, torch); these tests need neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from paths import DATA

pytest.importorskip("tokenizers")  # the [qwen3] extra (also in [test])

from codecspec.codec.audio import read_wav
from codecspec.families.qwen3_tts import encoder_graph as qwen3_encoder
from codecspec.families.qwen3_tts.encoder import SpeechEncoder
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

DATA = DATA / "qwen3_clone"
# base_icl: talker and predictor of equal width, a one-layer Mimi encoder; base_wide: a wider
# talker (projection to the predictor) and an encoder with other ratios, residual layers,
# shortcuts, grouped KV heads and an RVQ projection; base_third: the CustomVoice test shape as
# a Base checkpoint (scripts/qwen3_clone_fixtures.py)
VARIANTS = ("base_icl", "base_wide", "base_third")
MODEL = DATA / "base_icl"
CLIPS = ("ref_a", "ref_b")


def _fixtures(variant: str = "base_icl"):
    return np.load(DATA / f"{variant}.fixtures.npz")


def _cases(variant: str = "base_icl") -> list:
    return json.loads((DATA / f"{variant}.cases.json").read_text(encoding="utf-8"))


def _clip(name: str) -> np.ndarray:
    wav, sr = read_wav(DATA / f"{name}.wav")
    assert sr == 24000
    return wav


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_clone_cache")


@pytest.fixture(scope="module")
def encoders(cache):
    return {v: SpeechEncoder.load(DATA / v / "speech_tokenizer", cache_dir=cache) for v in VARIANTS}


@pytest.fixture(scope="module")
def encoder(encoders):
    return encoders["base_icl"]


# ---------------------------------------------------------------------- the encoder
@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_encoder_codes_equal_the_official_ones(encoders, variant, clip):
    want = _fixtures(variant)[f"clip_{clip}_codes"]
    got = encoders[variant].encode(_clip(clip))
    assert got.shape == want.shape  # ceil(samples / 1920) frames, 16 codes
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]


@pytest.mark.parametrize("variant", VARIANTS)
def test_encoder_fixtures_are_not_degenerate(variant):
    """Every codebook uses several entries, and the clips are not whole frames long (so the
    right padding of the strided convolutions is exercised)."""
    z = _fixtures(variant)
    for clip in CLIPS:
        codes = z[f"clip_{clip}_codes"]
        assert min(len(np.unique(codes[:, k])) for k in range(codes.shape[1])) >= 3
        assert len(_clip(clip)) % 1920


def test_encoder_graph_is_cached(encoder, cache):
    again = SpeechEncoder.load(MODEL / "speech_tokenizer", cache_dir=cache)
    assert again.graph_path == encoder.graph_path
    assert len(list(Path(cache).glob("qwen3-speech-encoder-*"))) == len(VARIANTS)


def _zero_padded_downsample(orig):
    def pad(g, x, left, stride, mode, label):
        return orig(g, x, left, stride, "constant", label)

    return pad


def _stride_one_downsample(orig):
    def conv(g, x, w, b, label, stride=1, dilation=1, mode="constant"):
        return orig(g, x, w, b, label, 1 if label == "downsample" else stride, dilation, mode)

    return conv


@pytest.mark.parametrize(
    "attr,breaker",
    [("_pad_time", _zero_padded_downsample), ("_conv", _stride_one_downsample)],
)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_broken_encoder_is_caught(tmp_path, monkeypatch, variant, attr, breaker):
    """The comparison above can fail: an encoder that pads the downsampling conv with zeros
    instead of repeating the edge frame, or downsamples with stride 1, gives other codes."""
    monkeypatch.setattr(qwen3_encoder, attr, breaker(getattr(qwen3_encoder, attr)))
    broken = SpeechEncoder.load(DATA / variant / "speech_tokenizer", cache_dir=tmp_path)
    z = _fixtures(variant)
    for clip in CLIPS:
        got, want = broken.encode(_clip(clip)), z[f"clip_{clip}_codes"]
        assert got.shape != want.shape or not np.array_equal(got, want)


def test_a_folder_without_encoder_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text((MODEL / "speech_tokenizer" / "config.json").read_text())
    with pytest.raises(ValueError, match="encoder tensors missing"):
        SpeechEncoder.load(tmp_path, cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------------- the clone
@pytest.fixture(scope="module")
def models(cache):
    return {v: Qwen3TTS.load(DATA / v, cache_dir=cache, weights="fp32") for v in VARIANTS}


@pytest.fixture(scope="module")
def tts(models):
    return models["base_icl"]


def _request(case: dict) -> dict:
    return dict(
        language=case["language"],
        ref_audio=DATA / f"{case['ref_audio']}.wav",
        ref_text=case["ref_text"],
        streaming_text=case.get("streaming", False),
    )


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    n = min(len(got), len(want))
    diff = np.argwhere(got[:n] != want[:n])
    if len(diff):
        f, k = diff[0]
        return f"first difference at frame {f}, group {k}: {got[f, k]} vs {want[f, k]}"
    return f"codecspec {len(got)} frames, official {len(want)}"


CASES = [(v, i) for v in VARIANTS for i in range(len(_cases(v)))]


@pytest.mark.parametrize("variant,i", CASES)
def test_icl_prompt_equals_the_official_one(models, variant, i):
    """Text ids token by token (target and reference transcript), the reference codes the
    prompt embeds, and the talker's prefill rows within float rounding."""
    tts, case, z = models[variant], _cases(variant)[i], _fixtures(variant)
    r = tts.generate_codes(case["text"], max_frames=0, temperature=0, **_request(case))
    assert np.array_equal(r.prompt.prompt_ids, z[f"case_{i}_prompt_ids"])
    assert np.array_equal(r.prompt.ref_ids, z[f"case_{i}_ref_ids"])
    assert np.array_equal(r.ref_codes, z[f"case_{i}_ref_codes"])
    rows, _ = tts.prompt_embeds(r.prompt)
    want = z[f"case_{i}_prefill"]
    assert rows.shape == want.shape
    np.testing.assert_allclose(rows, want, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("mode", ["ar", "spec"])
@pytest.mark.parametrize("variant,i", CASES)
def test_icl_greedy_codes_equal_official(models, variant, i, mode):
    case, z = _cases(variant)[i], _fixtures(variant)
    r = models[variant].generate_codes(case["text"], temperature=0, mode=mode, **_request(case))
    want = z[f"case_{i}_codes"]
    assert r.codes.shape == want.shape and np.array_equal(r.codes, want), (
        f"{variant} case {i} ({mode}): {_first_difference(r.codes, want)}"
    )


def test_fixture_cases_cover_both_layouts_and_endings():
    """Non-streaming and streaming text, with the text longer and shorter than the reference
    codes; some runs end at eos, others at the frame limit (max_new_tokens 20: 19 frames)."""
    for variant in VARIANTS:
        assert {bool(c.get("streaming")) for c in _cases(variant)} == {False, True}
    lengths = [len(_fixtures(v)[f"case_{i}_codes"]) for v, i in CASES]
    assert 19 in lengths and min(lengths) < 19


def test_shifted_reference_codes_are_caught(cache, monkeypatch):
    """The comparison above can fail: reference codes delayed by one frame (the first frame
    repeated) give other greedy codes in every case."""
    broken = Qwen3TTS.load(MODEL, cache_dir=cache, weights="fp32")
    orig = broken.reference_codes

    def shifted(ref_audio):
        codes = orig(ref_audio)
        return np.concatenate([codes[:1], codes[:-1]])

    monkeypatch.setattr(broken, "reference_codes", shifted)
    z = _fixtures()
    for i, case in enumerate(_cases()):
        r = broken.generate_codes(case["text"], temperature=0, **_request(case))
        want = z[f"case_{i}_codes"]
        assert r.codes.shape != want.shape or not np.array_equal(r.codes, want), i


def test_clone_audio_drops_the_reference_and_streams_alike(tmp_path):
    """The new frames' audio is decoded after the reference codes (their left context) and
    the reference's share cut off; the streamed form gives the same samples. A small random
    decoder of the same codebook stands in (the clone fixtures have no decoder weights)."""
    from codecspec.families.qwen3_tts.decoder import SpeechDecoder
    from codecspec.families.qwen3_tts.decoder_graph import (
        PUBLISHED_DECODER_CONFIG,
        write_random_speech_tokenizer,
    )
    from codecspec.families.qwen3_tts.pipeline import _after_reference, _stream_after_reference
    from codecspec.families.qwen3_tts.random_checkpoint import _TINY_DECODER_SIZES

    config = {**PUBLISHED_DECODER_CONFIG, **_TINY_DECODER_SIZES, "codebook_size": 32}
    write_random_speech_tokenizer(tmp_path / "st", config, seed=1)
    dec = SpeechDecoder.load(tmp_path / "st", cache_dir=tmp_path / "cache")
    z = _fixtures()
    ref, codes = z["case_0_ref_codes"], z["case_0_codes"]
    whole = dec.decode(np.concatenate([ref, codes]))
    wav = _after_reference(dec, ref, codes)
    assert len(wav) == len(codes) * 1920 and 1e-3 < np.abs(wav).max() < 1
    np.testing.assert_array_equal(wav, whole[-len(wav) :])
    assert not np.allclose(wav, dec.decode(codes), atol=1e-4)  # the context matters
    blocks = (f[None, :] for f in codes)
    streamed = np.concatenate(list(_stream_after_reference(dec, blocks, {"ref_codes": ref})))
    np.testing.assert_allclose(streamed, wav, atol=1e-4 * np.abs(wav).max())


# ---------------------------------------------------------------------- command line
def _synth_argv(tmp_path, case: dict, *extra) -> list:
    return [
        "synth",
        case["text"],
        "--model",
        str(MODEL),
        "--ref-audio",
        str(DATA / f"{case['ref_audio']}.wav"),
        "--language",
        case["language"],
        "--temperature",
        "0",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--json",
        *extra,
    ]


def test_cli_synth_with_ref_text_clones_in_context(tmp_path):
    from codecspec.cli import main

    case, out = _cases()[1], tmp_path / "codes.npy"
    argv = _synth_argv(tmp_path, case, "--ref-text", case["ref_text"], "--codes-out", str(out))
    assert main(argv + ["--mode", "spec"]) == 0
    assert np.array_equal(np.load(out), _fixtures()["case_1_codes"])


def test_cli_synth_without_ref_text_stays_x_vector_only(tmp_path):
    """No --ref-text: the x-vector-only prompt (no reference frames), other codes."""
    from codecspec.cli import main

    case, out = _cases()[1], tmp_path / "codes.npy"
    assert main(_synth_argv(tmp_path, case, "--codes-out", str(out))) == 0
    assert not np.array_equal(np.load(out), _fixtures()["case_1_codes"])


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(ref_text="   "), "^ref_text: must be a non-empty string"),
        (dict(ref_text=3), "^ref_text: must be a non-empty string"),
        (dict(ref_audio=None, ref_text="Hi."), "^ref_text: is the transcript of ref_audio"),
    ],
)
def test_bad_ref_text_is_refused(tts, kw, match):
    req = {"language": "english", "ref_audio": DATA / "ref_a.wav", **kw}
    with pytest.raises(ValueError, match=match):
        tts.generate_codes("Hello.", **req)


def test_ref_text_is_refused_for_other_models(tmp_path, capsys):
    from codecspec.cli import main

    assert main(["synth", "Hello.", "--ref-text", "Hi.", "-o", str(tmp_path / "x.wav")]) == 2
    assert "--ref-text: Qwen3-TTS checkpoints" in capsys.readouterr().err


def test_random_checkpoint_writes_encoder_weights(tmp_path):
    """`codecspec random-checkpoint` folders carry the encoder's tensors (the tiny shape's
    codebook width now equals its RVQ projection width, as the official encode needs), so
    the encoder graph builds from them."""
    from codecspec.families.qwen3_tts.random_checkpoint import write_random_checkpoint

    out = tmp_path / "tiny"
    write_random_checkpoint("tiny", out, seed=5)
    enc = SpeechEncoder.load(out / "speech_tokenizer", cache_dir=tmp_path / "cache")
    codes = enc.encode(_clip("ref_a"))
    assert codes.shape == (-(-len(_clip("ref_a")) // 1920), 16)
    assert codes.min() >= 0 and codes.max() < 64


def test_a_voice_prepared_once_clones_as_the_clip_does(tts):
    """`clone_voice` reads and encodes the clip once; requests given the result get the
    official codes, and a second ref_text beside it is refused."""
    case, z = _cases()[2], _fixtures()
    voice = tts.clone_voice(DATA / f"{case['ref_audio']}.wav", case["ref_text"])
    assert np.array_equal(voice.ref_codes, z["case_2_ref_codes"])
    r = tts.generate_codes(
        case["text"],
        language=case["language"],
        ref_audio=voice,
        streaming_text=True,
        temperature=0,
    )
    assert np.array_equal(r.codes, z["case_2_codes"])
    with pytest.raises(ValueError, match="^ref_text: a prepared voice"):
        tts.generate_codes("Hi.", ref_audio=voice, ref_text="Hello.")
