"""Qwen3-TTS checkpoint folders end to end against the official implementation's outputs.

The tiny checkpoints and fixtures under tests/data/qwen3_tiny/ come from
scripts/qwen3_parity_fixtures.py (official qwen-tts 0.1.1 classes, torch); these tests need
neither torch nor qwen-tts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import qwen3_cases as qc
from paths import DATA

pytest.importorskip("tokenizers")  # the [qwen3] extra (also in [test])

from codecspec.families.qwen3_tts.checkpoint import Qwen3Checkpoint
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
from codecspec.families.qwen3_tts.text import SPEAKER, build_prompt, load_text_tokenizer

DATA = DATA / "qwen3_tiny"
VARIANTS = ("custom_equal", "design_wide", "base_xvector")


def _cases(variant):
    cases = json.loads((DATA / f"{variant}.cases.json").read_text(encoding="utf-8"))
    return cases, np.load(DATA / f"{variant}.fixtures.npz")


def _all_cases():
    return [(v, i) for v in VARIANTS for i in range(len(_cases(v)[0]))]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_cache")


@pytest.fixture(scope="module")
def models(cache):
    return {v: Qwen3TTS.load(DATA / v, cache_dir=cache, weights="fp32") for v in VARIANTS}


def _request(tts, case):
    # The official wrapper drops instruct for 0.6B CustomVoice checkpoints; codecspec refuses
    # it there instead (see test_bad_input), so the parity request leaves it out.
    instruct = case.get("instruct") if tts.ck.accepts_instruct else None
    kw = dict(
        speaker=case.get("speaker"),
        language=qc.language(case),
        instruct=instruct,
        streaming_text=qc.streaming_text(case),
    )
    if case.get("ref_audio"):
        kw["ref_audio"] = DATA / case["ref_audio"]
    return kw


def _prompt_kw(tts, case):
    kw = _request(tts, case)
    kw["language"] = kw["language"] or "auto"  # build_prompt takes the resolved language
    if kw.pop("ref_audio", None) is not None:
        kw["speaker_vector"] = True
        tts._xvector = tts.speaker_vector(DATA / case["ref_audio"])
    return kw


# ---------------------------------------------------------------------- text front end
@pytest.mark.parametrize("variant,i", _all_cases())
def test_prompt_ids_match_official_token_by_token(variant, i):
    cases, z = _cases(variant)
    ck = Qwen3Checkpoint(DATA / variant)
    tok = load_text_tokenizer(ck.dir)
    c = cases[i]
    instruct = c.get("instruct") if ck.accepts_instruct else None
    p = build_prompt(
        tok,
        ck.spec,
        c["text"],
        language=qc.language(c) or "auto",
        speaker=c.get("speaker"),
        instruct=instruct,
        streaming_text=qc.streaming_text(c),
        speaker_vector=bool(c.get("ref_audio")),
    )
    assert p.prompt_ids.tolist() == z[f"case_{i}_prompt_ids"].tolist()
    assert p.instruct_ids.tolist() == z[f"case_{i}_instruct_ids"].tolist()
    # the layout the official call used, its method's default where the case named none
    assert p.streaming_text == bool(z[f"case_{i}_streaming"])


@pytest.mark.parametrize("variant,i", _all_cases())
def test_prompt_embeddings_match_official(models, variant, i):
    """The talker's prefill rows (layout, tags, speaker, dialect, instruct, text projection)."""
    cases, z = _cases(variant)
    tts = models[variant]
    p = build_prompt(tts.tok, tts.spec, cases[i]["text"], **_prompt_kw(tts, cases[i]))
    emb, _ = tts.prompt_embeds(p)
    ref = z[f"case_{i}_embeds"]
    assert emb.shape[0] + len(z[f"case_{i}_codes"]) == ref.shape[0]
    ref = ref[: len(emb)]
    xrow = (p.codec_ids == SPEAKER) & (p.speaker_id is None)  # a Base prompt's x-vector row
    np.testing.assert_allclose(emb[~xrow], ref[~xrow], atol=1e-5, rtol=0)
    # The x-vector (|x| up to ~70 here) carries the official float32 speaker encoder's
    # rounding: compare it relative to its own scale.
    for i in np.flatnonzero(xrow):
        np.testing.assert_allclose(emb[i], ref[i], atol=1e-5 * np.abs(ref[i]).max(), rtol=0)


def test_dialect_speaker_gets_its_dialect_tag(models):
    tts = models["custom_equal"]
    sp = tts.spec
    p = build_prompt(tts.tok, sp, "x", language="chinese", speaker="eric")
    assert sp.languages["sichuan_dialect"] in p.codec_ids.tolist()
    assert sp.languages["chinese"] not in p.codec_ids.tolist()
    p = build_prompt(tts.tok, sp, "x", language="english", speaker="eric")
    assert sp.languages["english"] in p.codec_ids.tolist()


# ---------------------------------------------------------------------- talker
@pytest.mark.parametrize("split", [False, True])  # the prompt's fixed rows as a call of their own
@pytest.mark.parametrize("variant", VARIANTS)
def test_teacher_forced_talker_logits_within_1e_4(models, variant, split):
    cases, z = _cases(variant)
    tts = models[variant]
    p = build_prompt(tts.tok, tts.spec, cases[0]["text"], **_prompt_kw(tts, cases[0]))
    emb, trailing = tts.prompt_embeds(p)
    codes, ref = z["case_0_codes"], z["case_0_logits"]
    fixed = p.fixed_rows if split else 0
    h = tts.talker.prefill(emb, capacity=4, fixed=fixed)  # small on purpose: the cache grows
    got = [tts.talker.logits(h)]
    for f, frame in enumerate(codes):
        e = tts.frame_embed(frame) + (trailing[f] if f < len(trailing) else tts._pad_row)
        got.append(tts.talker.logits(tts.talker.step(e)))
    np.testing.assert_allclose(np.stack(got), ref[len(emb) - 1 :], atol=1e-4, rtol=0)


# ---------------------------------------------------------------------- greedy parity
@pytest.mark.parametrize("mode", ["ar", "spec"])
@pytest.mark.parametrize("variant,i", _all_cases())
def test_greedy_codes_identical_to_official(models, variant, i, mode):
    cases, z = _cases(variant)
    tts = models[variant]
    r = tts.generate_codes(cases[i]["text"], mode=mode, temperature=0, **_request(tts, cases[i]))
    want = z[f"case_{i}_codes"]
    assert r.codes.shape == want.shape
    assert np.array_equal(r.codes, want)


def test_fixtures_cover_eos_and_the_frame_limit():
    lengths = {len(_cases(v)[1][f"case_{i}_codes"]) for v, i in _all_cases()}
    assert 19 in lengths and min(lengths) < 19  # max_new_tokens 20 -> 19 frames, and eos


def test_fixtures_call_every_method_with_its_own_defaults():
    """Each variant has requests that leave the layout and the language to the official
    method (whole text for CustomVoice / VoiceDesign, streaming text for a Base clone) and
    requests that name the other layout, so the greedy parity above covers the defaults."""
    official_default = {"custom_voice": 0, "voice_design": 0, "base": 1}
    for v in VARIANTS:
        cases, z = _cases(v)
        mode = Qwen3Checkpoint(DATA / v).model_type
        default = [i for i, c in enumerate(cases) if "non_streaming_mode" not in c]
        assert default and {int(z[f"case_{i}_streaming"]) for i in default} == {
            official_default[mode]
        }
        assert any(c.get("non_streaming_mode") is (mode == "base") for c in cases), v
        assert any("language" not in c for c in cases), v


def test_greedy_with_penalty_differs_from_greedy_without(models):
    """Without the repetition penalty the greedy run leaves the official trajectory: the
    penalty is live in these fixtures, not a no-op."""
    tts = models["custom_equal"]
    cases, z = _cases("custom_equal")
    gd = tts.ck.generation
    object.__setattr__(gd, "repetition_penalty", 1.0)
    try:
        diffs = 0
        for i, c in enumerate(cases):
            r = tts.generate_codes(c["text"], temperature=0, **_request(tts, c))
            want = z[f"case_{i}_codes"]
            diffs += r.codes.shape != want.shape or not np.array_equal(r.codes, want)
    finally:
        object.__setattr__(gd, "repetition_penalty", 1.05)
    assert diffs > 0


def test_sampled_runs_give_valid_codes(models):
    """Sampling runs: AR and speculative depth loops draw from the same law; with one seed
    both give valid codes of the right shape and range."""
    tts = models["design_wide"]
    for mode in ("ar", "spec"):
        r = tts.generate_codes("Hello world.", instruct="Warm.", mode=mode, seed=3)
        assert r.codes.ndim == 2 and r.codes.shape[1] == 16
        assert r.codes.min() >= 0 and r.codes[:, 1:].max() < 32


# ---------------------------------------------------------------------- sampling law
def _hf_law(logits, history, n_generated, spec, t, k, r):
    """transformers' processors in numpy: penalty, suppression, min_new_tokens, T, top-k."""
    x = logits.astype(np.float64).copy()
    for tok in set(history):
        x[tok] = x[tok] / r if x[tok] > 0 else x[tok] * r
    x[spec.suppressed_ids] = -np.inf
    if n_generated < 2:
        x[spec.codec["eos"]] = -np.inf
    x = x / t
    kth = np.sort(x)[-k]
    x[x < kth] = -np.inf
    p = np.exp(x - x.max())
    return p / p.sum()


@pytest.mark.parametrize("broken", [False, True])
def test_talker_sampling_law(models, broken):
    """Chi-square of 20000 talker draws against the official processors' law; the broken
    variant (penalty left out of the sampler) must be rejected."""
    from scipy.stats import chisquare

    import codecspec as cs
    from codecspec.families.qwen3_tts.talker import TalkerSampler

    tts = models["custom_equal"]
    sp = tts.spec
    rng = np.random.default_rng(0)
    logits = np.zeros(sp.vocab_size, np.float32)
    logits[:32] = rng.normal(0, 0.3, 32).astype(np.float32)
    logits[:6] = 2.0  # the penalised tokens carry most of the mass
    history = [0, 1, 2, 1, 3, 4, 5]
    penalty = 1.0 if broken else 1.6
    params = cs.SamplingParams(0.9, 20, 1.0, repetition_penalty=penalty)
    s = TalkerSampler(sp.vocab_size, sp.codec["eos"], sp.suppressed_ids, params)
    law = _hf_law(logits, history, len(history), sp, 0.9, 20, 1.6)
    g = cs.Generator(5)
    n = 20000
    draws = np.array([s.sample(logits, history, g) for _ in range(n)])
    support = np.flatnonzero(law > 0)
    assert np.isin(draws, support).all() or broken
    counts = np.bincount(draws, minlength=sp.vocab_size)[support]
    p = chisquare(counts, law[support] * n).pvalue
    if broken:
        assert p < 1e-6
    else:
        assert p > 1e-4
        np.testing.assert_allclose(s.probs(logits, history), law, atol=1e-6)


def test_eos_is_suppressed_until_two_tokens(models):
    import codecspec as cs
    from codecspec.families.qwen3_tts.talker import TalkerSampler

    sp = models["custom_equal"].spec
    s = TalkerSampler(sp.vocab_size, sp.codec["eos"], sp.suppressed_ids, cs.SamplingParams(0))
    logits = np.zeros(sp.vocab_size, np.float32)
    logits[sp.codec["eos"]] = 10.0
    g = cs.Generator(0)
    assert s.sample(logits, [], g) != sp.codec["eos"]
    assert s.sample(logits, [3], g) != sp.codec["eos"]
    assert s.sample(logits, [3, 4], g) == sp.codec["eos"]
    logits[sp.codec["pad"]] = 20.0  # suppressed special id
    assert s.sample(logits, [3, 4], g) == sp.codec["eos"]


# ---------------------------------------------------------------------- graph cache
def test_cache_is_reused_and_keyed_by_content(tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(DATA / "design_wide", src)
    Qwen3TTS.load(src, cache_dir=tmp_path / "c")
    entries = [p for p in (tmp_path / "c" / "qwen3").iterdir() if p.is_dir()]
    assert len(entries) == 1
    stamp = (entries[0] / "talker.onnx").stat().st_mtime_ns
    Qwen3TTS.load(src, cache_dir=tmp_path / "c")
    assert (entries[0] / "talker.onnx").stat().st_mtime_ns == stamp
    gen = json.loads((src / "generation_config.json").read_text())
    gen["top_k"] = 7
    (src / "generation_config.json").write_text(json.dumps(gen))
    Qwen3TTS.load(src, cache_dir=tmp_path / "c")
    assert len([p for p in (tmp_path / "c" / "qwen3").iterdir() if p.is_dir()]) == 2


# ---------------------------------------------------------------------- bad input
def _copy(tmp_path, variant="custom_equal") -> Path:
    d = tmp_path / variant
    shutil.copytree(DATA / variant, d)
    return d


def _edit_config(d: Path, fn) -> None:
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


def _load_error(d, tmp_path) -> str:
    with pytest.raises(ValueError) as e:
        Qwen3TTS.load(d, cache_dir=tmp_path / "cache")
    msg = str(e.value)
    assert "\n" not in msg
    leftovers = list((tmp_path / "cache").rglob("*")) if (tmp_path / "cache").exists() else []
    # hashes.json only remembers checkpoint hashes; no graph file may remain
    built = [p for p in leftovers if p.is_file() and p.name != "hashes.json"]
    assert not built, "half-built files left in the cache"
    return msg


def test_not_a_folder(tmp_path):
    assert _load_error(tmp_path / "nope", tmp_path).startswith("model:")


def test_folder_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "config.json" in _load_error(tmp_path / "empty", tmp_path)


def test_other_model_config(tmp_path):
    d = tmp_path / "llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert "not a Qwen3-TTS" in _load_error(d, tmp_path)


def test_25hz_tokenizer(tmp_path):
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.update(tokenizer_type="qwen3_tts_tokenizer_25hz"))
    assert "25 Hz" in _load_error(d, tmp_path)


def test_missing_tokenizer_files(tmp_path):
    d = _copy(tmp_path)
    (d / "merges.txt").unlink()
    assert "merges.txt" in _load_error(d, tmp_path)


def test_missing_weights(tmp_path):
    d = _copy(tmp_path)
    (d / "model.safetensors").unlink()
    assert "safetensors" in _load_error(d, tmp_path)


@pytest.mark.parametrize("keep", [4, 1000, -200])
def test_truncated_weights(tmp_path, keep):
    d = _copy(tmp_path)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:keep] if keep > 0 else data[:keep])
    assert _load_error(d, tmp_path).startswith("model:")


def test_missing_tensor_leaves_nothing_half_built(tmp_path):
    """The talker graph is built before the depth graph fails: the temporary folder goes."""
    from codecspec.graphs.safetensors_io import SafetensorsFile, write_safetensors

    d = _copy(tmp_path)
    f = SafetensorsFile(d / "model.safetensors")
    tensors = {k: f.get(k) for k in f.keys() if "code_predictor.lm_head.3" not in k}
    f.close()
    write_safetensors(d / "model.safetensors", tensors, "f32")
    assert "lm_head.3" in _load_error(d, tmp_path)


@pytest.mark.parametrize(
    "variant,kw,arg",
    [
        ("custom_equal", dict(speaker="nobody"), "speaker"),
        ("custom_equal", dict(language="klingon"), "language"),
        ("custom_equal", dict(language="sichuan_dialect"), "language"),
        ("custom_equal", dict(speaker="aiden", instruct="Warm."), "instruct"),
        ("design_wide", dict(speaker="aiden"), "speaker"),
        ("custom_equal", dict(mode="pcg"), "mode"),
    ],
)
def test_bad_request_arguments(models, variant, kw, arg):
    with pytest.raises(ValueError) as e:
        models[variant].generate_codes("Hello.", **kw)
    assert str(e.value).startswith(f"{arg}:")


def test_empty_text(models):
    with pytest.raises(ValueError, match="^text:"):
        models["custom_equal"].generate_codes("  ")


def test_text_over_the_token_budget(tmp_path):
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c["talker_config"].update(max_position_embeddings=24))
    tts = Qwen3TTS.load(d, cache_dir=tmp_path / "cache", weights="fp32")
    with pytest.raises(ValueError, match="^text:"):
        tts.generate_codes("The quick brown fox jumps over the lazy dog. " * 3, speaker="aiden")
    r = tts.generate_codes("Hi.", speaker="aiden", temperature=0)  # a short text still fits
    assert len(r.prompt) + r.frames <= 24


def test_xvector_matches_official(models):
    z = _cases("base_xvector")[1]
    x = models["base_xvector"].speaker_vector(DATA / "ref.wav")
    ref = z["case_0_xvector"]
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


def _write_wav(path, wav, sr):
    import wave

    with wave.open(str(path), "wb") as w:  # write_wav refuses an empty file; a user may not
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(np.round(np.asarray(wav) * 32767).astype("<i2").tobytes())
    return path


@pytest.mark.parametrize(
    "variant,ref,needle",
    [
        ("base_xvector", None, "Base checkpoint clones"),
        ("custom_equal", "ref.wav", "does not clone"),
        ("base_xvector", "missing.wav", "no such file"),
        ("base_xvector", "rate16k.wav", "silent"),  # resampled, then found silent
        ("base_xvector", "empty.wav", "too short"),
        ("base_xvector", "notwav.wav", "not a readable audio file"),
    ],
)
def test_bad_reference_audio(models, tmp_path, variant, ref, needle):
    _write_wav(tmp_path / "rate16k.wav", np.zeros(16000, np.float32), 16000)
    _write_wav(tmp_path / "empty.wav", np.zeros(0, np.float32), 24000)
    (tmp_path / "notwav.wav").write_bytes(b"RIFF nonsense")
    path = None if ref is None else (DATA / ref if ref == "ref.wav" else tmp_path / ref)
    kw = {"speaker": "aiden"} if variant == "custom_equal" else {}
    with pytest.raises(ValueError) as e:
        models[variant].generate_codes("Hello.", ref_audio=path, **kw)
    assert str(e.value).startswith("ref_audio:") and needle in str(e.value)


def test_base_refuses_speaker_and_instruct(models):
    for kw, arg in ((dict(speaker="aiden"), "speaker"), (dict(instruct="Warm."), "instruct")):
        with pytest.raises(ValueError, match=f"^{arg}:"):
            models["base_xvector"].generate_codes("Hi.", ref_audio=DATA / "ref.wav", **kw)


# ---------------------------------------------------------------------- no torch, CLI
def test_run_path_does_not_import_torch(tmp_path):
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, Block())
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
tts = Qwen3TTS.load({str(DATA / "custom_equal")!r}, cache_dir={str(tmp_path)!r}, weights="fp32")
r = tts.generate_codes("Hello world.", speaker="aiden", language="english", temperature=0,
                       mode="spec")
assert "torch" not in sys.modules
try:
    import torch  # the blocker works: this must fail
    raise SystemExit("torch was importable")
except ImportError:
    pass
print(r.codes.shape[0])
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == len(_cases("custom_equal")[1]["case_0_codes"])


def test_cli_synth_codes_out(tmp_path, monkeypatch):
    from codecspec.cli import main

    monkeypatch.setenv("CODECSPEC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "codes.npy"
    rc = main(
        [
            "synth",
            "The quick brown fox.",
            "--model",
            str(DATA / "custom_equal"),
            "--speaker",
            "Vivian",
            "--language",
            "Auto",
            "--temperature",
            "0",
            "--mode",
            "spec",
            "--weights",
            "fp32",
            "--codes-out",
            str(out),
            "--json",
        ]
    )
    assert rc == 0
    codes = np.load(out)
    assert codes.dtype == np.int64
    assert np.array_equal(codes, _cases("custom_equal")[1]["case_1_codes"])
    assert not (tmp_path / "out.wav").exists()


def test_cli_synth_bad_speaker_is_one_line(tmp_path, monkeypatch, capsys):
    from codecspec.cli import main

    monkeypatch.setenv("CODECSPEC_CACHE", str(tmp_path / "cache"))
    rc = main(
        [
            "synth",
            "Hi.",
            "--model",
            str(DATA / "custom_equal"),
            "--speaker",
            "zed",
            "--codes-out",
            str(tmp_path / "c.npy"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "speaker:" in err and "\n" not in err


def test_cli_synth_wav_end_to_end(tmp_path, monkeypatch):
    """Needs the 12 Hz decoder (families.qwen3_tts.decoder, built on another branch)."""
    pytest.importorskip("codecspec.families.qwen3_tts.decoder")
    from codecspec.cli import main
    from codecspec.codec.audio import read_wav

    monkeypatch.setenv("CODECSPEC_CACHE", str(tmp_path / "cache"))
    wav = tmp_path / "out.wav"
    rc = main(
        [
            "synth",
            "Hello world.",
            "--model",
            str(DATA / "custom_equal"),
            "--speaker",
            "aiden",
            "--temperature",
            "0",
            "--weights",
            "fp32",
            "-o",
            str(wav),
            "--json",
        ]
    )
    assert rc == 0
    audio, sr = read_wav(wav)
    assert sr == 24000
    assert len(audio) == 1920 * len(_cases("custom_equal")[1]["case_0_codes"])


@pytest.mark.slow
def test_calibrate_stores_offsets_and_tree_and_spec_stays_exact(tmp_path):
    """calibrate --model DIR on the tiny checkpoint; afterwards the speculative loop uses the
    trained offsets and tree and its greedy codes are still the official ones."""
    from codecspec.families.qwen3_tts.calibrate import calibrate_checkpoint

    result, entry = calibrate_checkpoint(
        DATA / "design_wide",
        cache_dir=tmp_path,
        frames=48,
        budgets=(1, 2),
        progress=False,
        weights="fp32",
    )
    for name in ("offsets.npy", "tree.json", "decision.json"):
        assert (entry / name).is_file()
    from codecspec.calibrate.decision import DECISION_FORMAT, read_decision

    decision = read_decision(entry / "decision.json")  # the one format, measured end to end
    assert json.loads((entry / "decision.json").read_text())["format"] == DECISION_FORMAT
    speedup = result.end_to_end["speedup"]
    rows = decision.measured["tree_rows"]  # verify rows scored against AR on this device
    assert rows["exact"] and rows["frames"] > 0 and rows["max_rel_diff"] <= 1e-5
    assert decision.speculate is (speedup > 1.0)
    assert decision.measured["measured_speedup"] == speedup
    assert decision.measured["weights"] == "fp32" and "cpu_model" in decision.device
    tts = Qwen3TTS.load(DATA / "design_wide", cache_dir=tmp_path, weights="fp32")
    assert np.abs(tts.depth.offsets).max() > 0
    cases, z = _cases("design_wide")
    for i, c in enumerate(cases):
        r = tts.generate_codes(c["text"], mode="spec", temperature=0, **_request(tts, c))
        assert np.array_equal(r.codes, z[f"case_{i}_codes"])


def test_stream_equals_whole_decode(models):
    """Needs the 12 Hz decoder: streamed audio of a request = the whole decode of its codes."""
    pytest.importorskip("codecspec.families.qwen3_tts.decoder")
    tts = models["custom_equal"]
    kw = dict(speaker="aiden", language="english", temperature=0)
    wav, r = tts.synthesize("Hello world.", **kw)
    streamed = np.concatenate(list(tts.stream("Hello world.", **kw)))
    assert len(streamed) == len(wav) == 1920 * r.frames
    np.testing.assert_allclose(streamed, wav, atol=1e-4, rtol=0)


class _StandInDecoder:
    """The SpeechDecoder interface (load / decode / stream / sample_rate) with a trivial
    waveform, to test codecspec's plumbing around the real decoder where it is absent."""

    sample_rate = 24000
    loaded_from = None

    @classmethod
    def load(cls, speech_tokenizer_dir, cache_dir=None, provider="cpu", precision=None):
        cls.loaded_from = Path(speech_tokenizer_dir)
        return cls()

    def decode(self, codes):
        codes = np.asarray(codes)
        assert codes.ndim == 2 and codes.shape[1] == 16
        return np.repeat(codes[:, 0].astype(np.float32) / 64.0, 1920)

    def stream(self, code_iter, chunk_frames=4, first_chunk_frames=None):
        for block in code_iter:  # blocks of codes [n, 16], as the real decoder takes them
            yield self.decode(block)


@pytest.fixture
def stand_in_decoder(monkeypatch):
    import types

    mod = types.ModuleType("codecspec.families.qwen3_tts.decoder")
    mod.SpeechDecoder = _StandInDecoder
    monkeypatch.setitem(sys.modules, "codecspec.families.qwen3_tts.decoder", mod)
    return _StandInDecoder


@pytest.mark.parametrize("stream", [False, True])
def test_cli_wav_plumbing_with_a_stand_in_decoder(tmp_path, monkeypatch, stand_in_decoder, stream):
    from codecspec.cli import main
    from codecspec.codec.audio import read_wav

    monkeypatch.setenv("CODECSPEC_CACHE", str(tmp_path / "cache"))
    wav = tmp_path / "out.wav"
    argv = [
        "synth",
        "Hello world.",
        "--model",
        str(DATA / "custom_equal"),
        "--speaker",
        "aiden",
        "--language",
        "english",
        "--temperature",
        "0",
        "--weights",
        "fp32",
        "-o",
        str(wav),
        "--json",
    ]
    assert main(argv + (["--stream"] if stream else [])) == 0
    audio, sr = read_wav(wav)
    codes = _cases("custom_equal")[1]["case_0_codes"]
    assert sr == 24000 and len(audio) == 1920 * len(codes)
    want = np.repeat(codes[:, 0] / 64.0, 1920)
    np.testing.assert_allclose(audio, want, atol=1 / 32767)
    assert stand_in_decoder.loaded_from == DATA / "custom_equal" / "speech_tokenizer"


def test_index_naming_a_missing_shard(tmp_path):
    d = _copy(tmp_path)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"talker.codec_head.weight": "model-00002-of-00002.safetensors"}})
    )
    assert "model-00002-of-00002" in _load_error(d, tmp_path)


def test_sampling_defaults_and_overrides(models):
    tts = models["custom_equal"]
    talk, depth = tts.sampling()
    assert (talk.temperature, talk.top_k, talk.top_p) == (pytest.approx(0.9), 50, 1.0)
    assert talk.repetition_penalty == pytest.approx(1.05) and depth.repetition_penalty == 1.0
    talk, depth = tts.sampling(0, 5, 0.5)
    assert talk.greedy and depth.greedy and (talk.top_k, talk.top_p) == (5, 0.5)
    assert talk.repetition_penalty == pytest.approx(1.05)
    with pytest.raises(ValueError, match="top_p"):
        tts.generate_codes("Hi.", speaker="aiden", top_p=2.0)
    with pytest.raises(ValueError, match="^subtalker_top_p"):
        tts.generate_codes("Hi.", speaker="aiden", subtalker_top_p=2.0)


def test_sampling_overrides_are_each_models_own(models):
    """As the official methods' keywords: temperature / top_k / top_p are the talker's,
    subtalker_* the code predictor's (generate_custom_voice(text, temperature=0.7) samples the
    code predictor at the checkpoint's 0.9); temperature 0 alone is greedy for both."""
    tts = models["custom_equal"]
    _, default_depth = tts.sampling()
    talk, depth = tts.sampling(0.7, 5, 0.5)
    assert (talk.temperature, talk.top_k, talk.top_p) == (pytest.approx(0.7), 5, 0.5)
    assert depth == default_depth
    talk, depth = tts.sampling(subtalker_temperature=0.3, subtalker_top_k=7, subtalker_top_p=0.8)
    assert (depth.temperature, depth.top_k) == (pytest.approx(0.3), 7)
    assert depth.top_p == pytest.approx(0.8)
    assert talk == tts.sampling()[0]
    talk, depth = tts.sampling(0, subtalker_temperature=0.5)
    assert talk.greedy and depth.temperature == pytest.approx(0.5)
    # the law reaches the codes: a sampled code predictor draws other codes than a greedy one
    kw = dict(speaker="aiden", temperature=0, max_frames=6, seed=3)
    greedy = tts.generate_codes("Hello there.", **kw).codes
    again = tts.generate_codes("Hello there.", subtalker_temperature=0, **kw).codes
    sampled = tts.generate_codes("Hello there.", subtalker_temperature=1.5, **kw).codes
    assert np.array_equal(greedy, again)
    assert greedy[0, 0] == sampled[0, 0]  # the talker's first c0: greedy in both runs
    n = min(len(greedy), len(sampled))
    assert not np.array_equal(greedy[:n, 1:], sampled[:n, 1:])


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["calibrate"], "model:"),
        (["calibrate", "x.onnx", "--model", "y"], "--model:"),
        (["calibrate", "x.onnx"], "--output:"),
    ],
)
def test_cli_calibrate_argument_errors(argv, needle, capsys):
    from codecspec.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_bench_reports_both_modes_and_greedy_equality(tmp_path):
    from codecspec.families.qwen3_tts.bench import bench_qwen3

    res = bench_qwen3(
        DATA / "custom_equal", frames=8, cache_dir=tmp_path, temperature=0, weights="fp32"
    )
    assert res["greedy_spec_equals_ar"] is True and res["frames"] == 8
    assert res["calls_per_frame"]["ar"] == 15
    assert res["calls_per_frame"]["spec"] <= 15 and res["depth_speedup"] > 0
    for key in (
        "ms_per_frame",
        "stage_ms_per_frame",
        "depth_speedup",
        "pipeline_rtf",
        "bound_ms_per_frame",
        "peak_rss_mb",
        "weights",
        "acceptance",
        "bandwidth_gbps",
    ):
        assert key in res, key
    for mode in ("ar", "spec"):
        assert res["ms_per_frame"][mode] > 0 and res["bound_ms_per_frame"][mode] > 0
        assert res["pipeline_rtf"][mode] == pytest.approx(res["ms_per_frame"][mode] / 80.0)
    assert set(res["stage_ms_per_frame"]) >= {"talker step", "depth loop", "speech decoder"}
    assert res["weights"] == "fp32" and res["acceptance"] is None


@pytest.mark.parametrize("dtype", ["bf16", "f32", "f16"])
def test_safetensors_rows_read_only_the_rows_asked_for(tmp_path, dtype):
    from codecspec.graphs.safetensors_io import SafetensorsFile, write_safetensors

    table = np.random.default_rng(0).standard_normal((50, 7)).astype(np.float32)
    write_safetensors(tmp_path / "t.safetensors", {"t": table, "v": table[0]}, dtype)
    f = SafetensorsFile(tmp_path / "t.safetensors")
    ids = np.array([3, 0, 49, 3])
    assert np.array_equal(f.rows("t", ids), f.get("t")[ids])
    for bad in ([50], [-1]):
        with pytest.raises(ValueError, match="row ids"):
            f.rows("t", np.array(bad))
    with pytest.raises(ValueError, match="2-D"):
        f.rows("v", ids)


def test_layer_types_must_match_the_layer_count(tmp_path):
    d = _copy(tmp_path)
    _edit_config(
        d,
        lambda c: c["talker_config"]["code_predictor_config"].update(
            layer_types=["full_attention"] * 7
        ),
    )
    assert "layer_types" in _load_error(d, tmp_path)


def test_unwritable_cache_dir_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="^cache_dir:"):
        Qwen3TTS.load(DATA / "custom_equal", cache_dir=blocker / "cache")


def test_cli_synth_base_voice_clone_codes(tmp_path, monkeypatch):
    from codecspec.cli import main

    monkeypatch.setenv("CODECSPEC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "codes.npy"
    argv = [
        "synth",
        "Hello world.",
        "--model",
        str(DATA / "base_xvector"),
        "--ref-audio",
        str(DATA / "ref.wav"),
        "--language",
        "english",
        "--temperature",
        "0",
        "--weights",
        "fp32",
        "--mode",
        "spec",
        "--codes-out",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    assert np.array_equal(np.load(out), _cases("base_xvector")[1]["case_0_codes"])


def test_bench_on_a_base_checkpoint_needs_and_uses_a_reference(tmp_path):
    from codecspec.families.qwen3_tts.bench import bench_qwen3

    with pytest.raises(ValueError, match="^ref_audio:"):
        bench_qwen3(DATA / "base_xvector", frames=4, cache_dir=tmp_path, decoder=False)
    res = bench_qwen3(
        DATA / "base_xvector",
        frames=4,
        cache_dir=tmp_path,
        temperature=0,
        ref_audio=DATA / "ref.wav",
        weights="fp32",
        decoder=False,
    )
    assert res["greedy_spec_equals_ar"] is True and res["frames"] > 0
