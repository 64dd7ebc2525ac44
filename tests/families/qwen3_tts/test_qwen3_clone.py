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
import qwen3_cases as qc
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
    # x-vector-only cases have no ref_text (codecspec's x-vector-only mode); a case without
    # "non_streaming_mode" / "language" leaves them to codecspec's defaults, which must be
    # the official method's
    return dict(
        language=qc.language(case),
        ref_audio=DATA / f"{case['ref_audio']}.wav",
        ref_text=case.get("ref_text"),
        streaming_text=qc.streaming_text(case),
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
    prompt embeds, the layout the official call used, and the talker's prefill rows within
    float rounding."""
    tts, case, z = models[variant], _cases(variant)[i], _fixtures(variant)
    r = tts.generate_codes(case["text"], max_frames=0, temperature=0, **_request(case))
    assert np.array_equal(r.prompt.prompt_ids, z[f"case_{i}_prompt_ids"])
    assert np.array_equal(r.prompt.ref_ids, z[f"case_{i}_ref_ids"])
    ref_codes = r.ref_codes if case.get("ref_text") else np.zeros((0, 16), np.int64)
    assert case.get("ref_text") or r.ref_codes is None  # x-vector only: no reference frames
    assert np.array_equal(ref_codes, z[f"case_{i}_ref_codes"])
    assert r.prompt.streaming_text == bool(z[f"case_{i}_streaming"])
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


def test_fixture_cases_cover_the_defaults_both_layouts_and_endings():
    """Every variant has in-context requests that leave the layout to generate_voice_clone
    (its default, streaming text), that name streaming text and that name the whole text,
    and an x-vector-only request (no transcript) with the default layout; the text is longer
    and shorter than the reference codes; some runs end at eos, others at the frame limit
    (max_new_tokens 20: 19 frames)."""
    for variant in VARIANTS:
        cases, z = _cases(variant), _fixtures(variant)
        icl = [c.get("non_streaming_mode", "default") for c in cases if c.get("ref_text")]
        assert {"default", False, True} <= set(icl), variant
        xvec = [i for i, c in enumerate(cases) if c.get("x_vector_only_mode")]
        assert xvec and all("ref_text" not in cases[i] for i in xvec), variant
        assert any("non_streaming_mode" not in cases[i] for i in xvec), variant
        for i, c in enumerate(cases):  # the official default is the streaming layout
            want = c.get("non_streaming_mode") is not True
            assert bool(z[f"case_{i}_streaming"]) == want, (variant, i)
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
        if not case.get("ref_text"):  # x-vector only: no reference codes in the prompt
            continue
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
def _synth_argv(cache, case: dict, *extra) -> list:
    """What a user types for the case: its text, clip, and only the options the case has
    (--language, --ref-text), greedy."""
    argv = ["synth", case["text"], "--model", str(MODEL)]
    argv += ["--ref-audio", str(DATA / f"{case['ref_audio']}.wav")]
    if "language" in case:
        argv += ["--language", case["language"]]
    if case.get("ref_text"):
        argv += ["--ref-text", case["ref_text"]]
    return argv + ["--temperature", "0", "--cache-dir", str(cache), "--json", *extra]


def _cli_codes(cache, tmp_path, capsys, case: dict, *extra) -> tuple:
    """(codes, the JSON report) of `codecspec synth` for the case."""
    from codecspec.cli import main

    out = tmp_path / "codes.npy"
    capsys.readouterr()
    assert main(_synth_argv(cache, case, "--codes-out", str(out), *extra)) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return np.load(out), report


def _default_cases(in_context: bool) -> list:
    """base_icl's cases that leave the layout to generate_voice_clone."""
    return [
        i
        for i, c in enumerate(_cases())
        if "non_streaming_mode" not in c and bool(c.get("ref_text")) == in_context
    ]


@pytest.mark.parametrize("in_context", [True, False])
def test_cli_synth_defaults_give_the_official_default_codes(cache, tmp_path, capsys, in_context):
    """Issue 49: `codecspec synth --model BASE_DIR --ref-audio A [--ref-text T]
    --temperature 0 TEXT`, no layout flag, gives the codes of the official
    generate_voice_clone called with no layout either (its default: streaming text), in
    context and x-vector only (the last also with no --language: the official "Auto")."""
    z = _fixtures()
    for i in _default_cases(in_context):
        codes, report = _cli_codes(cache, tmp_path, capsys, _cases()[i])
        want = z[f"case_{i}_codes"]
        assert codes.shape == want.shape and np.array_equal(codes, want), (
            f"case {i}: {_first_difference(codes, want)}"
        )
        assert report["streaming_text"] is True  # and the report says which layout


def test_cli_synth_speculative_clone_gives_the_official_default_codes(cache, tmp_path, capsys):
    i = _default_cases(True)[-1]
    codes, _ = _cli_codes(cache, tmp_path, capsys, _cases()[i], "--mode", "spec")
    assert np.array_equal(codes, _fixtures()[f"case_{i}_codes"])


@pytest.mark.parametrize("flag,nsm", [("--no-streaming-text", True), ("--streaming-text", False)])
def test_cli_synth_chooses_either_layout(cache, tmp_path, capsys, flag, nsm):
    """--no-streaming-text gives the official non_streaming_mode=True codes (whole text),
    --streaming-text its non_streaming_mode=False codes."""
    z = _fixtures()
    picked = [i for i, c in enumerate(_cases()) if c.get("non_streaming_mode") is nsm]
    assert picked
    for i in picked[:1]:
        codes, report = _cli_codes(cache, tmp_path, capsys, _cases()[i], flag)
        assert report["streaming_text"] is (not nsm)
        assert np.array_equal(codes, z[f"case_{i}_codes"]), i


def test_cli_synth_without_ref_text_stays_x_vector_only(cache, tmp_path, capsys):
    """No --ref-text: the x-vector-only prompt (no reference frames), other codes than
    the in-context clone of the same clip and text."""
    i = _default_cases(True)[0]
    case = {k: v for k, v in _cases()[i].items() if k != "ref_text"}
    codes, _ = _cli_codes(cache, tmp_path, capsys, case)
    assert not np.array_equal(codes, _fixtures()[f"case_{i}_codes"])


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(ref_text="   "), "^ref_text: must be a non-empty string"),
        (dict(ref_text=3), "^ref_text: must be a non-empty string"),
        (dict(ref_audio=None, ref_text="Hi."), "^ref_text: is the transcript of ref_audio"),
        # a layout is True, False or None: 1 or "false" is not read as one
        (dict(streaming_text=1), "^streaming_text: must be True"),
        (dict(streaming_text="false"), "^streaming_text: must be True"),
    ],
)
def test_bad_ref_text_is_refused(tts, kw, match):
    req = {"language": "english", "ref_audio": DATA / "ref_a.wav", **kw}
    with pytest.raises(ValueError, match=match):
        tts.generate_codes("Hello.", **req)


@pytest.mark.parametrize(
    "flags", [["--ref-text", "Hi."], ["--streaming-text"], ["--no-streaming-text"]]
)
def test_qwen3_flags_are_refused_for_other_models(tmp_path, capsys, flags):
    """Either layout flag too: a model with one layout cannot give what was asked for; the
    error names the option given (--no-streaming-text is the --streaming-text option)."""
    from codecspec.cli import main

    assert main(["synth", "Hello.", *flags, "-o", str(tmp_path / "x.wav")]) == 2
    option = flags[0].replace("--no-", "--")
    assert f"{option}: only for Qwen3-TTS checkpoint folders" in capsys.readouterr().err


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
        streaming_text=qc.streaming_text(case),
        temperature=0,
    )
    assert np.array_equal(r.codes, z["case_2_codes"])
    with pytest.raises(ValueError, match="^ref_text: a prepared voice"):
        tts.generate_codes("Hi.", ref_audio=voice, ref_text="Hello.")
