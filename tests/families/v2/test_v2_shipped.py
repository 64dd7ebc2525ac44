"""The shipped reference model v2: files and budget, synthesis with its stop head, the CLI and
bench keys, and the speculative law of its depth loop on the real model (a broken verifier
caught); the v1 shipped-model tests carried over."""

import json

import numpy as np
import pytest
from broken_variants import OffsetShiftedVerifier
from test_perf import check_record

import codecspec as cs
from codecspec.cli import main
from codecspec.decode import DepthDecoder
from codecspec.families.v2.model import V2_FILES, V2TTS, default_v2_dir
from codecspec.fidelity import per_position_pvalues
from codecspec.pipeline.depth_bench import load_frames

MODEL = default_v2_dir()
HELLO = "həlˈoʊ wˈɜːld | ðɪs ɪz ɐ tˈɛst"  # espeak-ng's IPA for "Hello world. This is a test."


@pytest.fixture(scope="module")
def tts():
    return V2TTS(provider="cpu", threads=1)


def test_shipped_files_exist_and_fit_the_budget():
    for f in V2_FILES + ("frames.npz", "offsets.npy", "tree.json", "MODEL_CARD.md"):
        assert (MODEL / f).is_file() and (MODEL / f).stat().st_size, f
    total = sum(p.stat().st_size for p in MODEL.rglob("*") if p.is_file())
    assert total <= 40 * 2**20, f"models must stay within 40 MB, got {total / 2**20:.1f} MB"
    rep = json.loads((MODEL / "report.json").read_text())
    block = rep["acceptance"]
    K = json.loads((MODEL / "model.json").read_text())["depth_config"]["num_draft_offsets"]
    assert set(block) >= {"theta", "depth_exact", "depth_group", "temporal_exact"}
    assert len(block["depth_exact"]) == len(block["depth_group"]) == K
    assert all(g >= e for g, e in zip(block["depth_group"], block["depth_exact"]))


def test_the_stop_head_ends_a_short_utterance(tts):
    s = tts.generate("", phonemes=HELLO, seed=3, mode="ar")
    assert not s.hit_max_frames, "the stop head must end a short sentence"
    expected = tts.expected_frames(len(tts.frontend.vocab.encode(HELLO)), "en")
    assert 0.5 * expected < s.frames < 1.6 * expected
    assert s.codes.shape[1] == 16 and s.codes.max() < 1024 and s.codes.min() >= 0
    assert len(s.wav) == s.frames * tts.codec.spectral.frame_hop
    assert np.sqrt(np.mean(s.wav**2)) > 1e-3, "silent output"
    again = tts.generate("", phonemes=HELLO, seed=3, mode="ar")
    np.testing.assert_array_equal(s.codes, again.codes)


def test_a_tiny_guard_is_reported(tts):
    s = tts.generate("", phonemes=HELLO, seed=0, max_frames=4, decode_audio=False)
    assert s.hit_max_frames and s.frames == 4


def test_both_loops_speculate_on_the_shipped_model(tts):
    from codecspec.decode.temporal import Acceptance

    for acc in ("exact", Acceptance("pcg", theta=0.9), Acceptance("ssd", beta=0.3)):
        s = tts.generate("", phonemes=HELLO, seed=1, temporal="spec", accept=acc, mode="spec")
        st = s.temporal_stats
        # one target call a round, 3 drafts a round (the default draft_len)
        assert st.target_calls == st.rounds == len(st.accepted_per_round) > 0
        assert st.drafted == 3 * st.rounds and st.accepted == sum(st.accepted_per_round)
        # a round emits its accepted drafts and the target's token; a stop may cut the last
        assert st.frames == s.frames
        assert st.rounds + st.accepted - 3 <= st.frames <= st.rounds + st.accepted
        # the shipped draft LM is accepted often enough that speculation saves target calls
        # (AR is 1.0; seed 1 gives 2.6 exact, 3.1 pcg, 3.7 ssd)
        assert 2.0 < st.tokens_per_call <= 4.0, (acc, st.tokens_per_call)


def test_synth_and_bench_json(tmp_path, capsys):
    out = tmp_path / "v2.wav"
    argv = ["synth", "--model", "v2", "--phonemes", HELLO, "-o", str(out), "--json"]
    assert main(argv + ["--loops", "both", "--accept", "pcg", "--threads", "1"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for k in ("hit_max_frames", "temporal_tokens_per_call", "time_to_first_audio_ms"):
        assert k in rep, k
    assert out.stat().st_size > 44
    argv = ["bench", "--model", "v2", "--frames", "6", "--texts", "1", "--json", "--threads", "1"]
    assert main(argv + ["--loops", "temporal", "--accept", "ssd", "--beta", "0.2"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for k in (
        "temporal_tokens_per_call",
        "temporal_speedup",
        "e2e_speedup",
        "depth_speedup",
        "pipeline_speedup",
        "quality",
        "speedup",
        "fidelity_min_p",
    ):
        assert k in res, k
    assert res["accept"] == "ssd(beta=0.2)"
    # the bench record (codecspec.perf); --loops temporal: the depth loop is AR on both sides
    stages = ["frontend", "temporal step", "depth loop", "vocoder", "depth loop alone"]
    check_record(res, "v2", stages)
    assert res["stages"][2].get("spec_is_ar") and not res["stages"][1].get("spec_is_ar")
    assert res["stages"][1]["bytes_spec"] != res["stages"][1]["bytes_ar"]  # draft + target
    assert res["temporal_speedup"] > 0 and "temporal speculation" in res["verdict"]
    # the default: the loops calibration found to pay, exact (never slower than AR by design)
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["loops"] == "auto" and res["accept"] == "exact"


def test_bench_depth_loop_with_the_group_rule(capsys):
    # --loops depth --accept pcg: the temporal loop is AR (no c0 groups needed), the depth
    # loop runs group-level acceptance.
    argv = ["bench", "--model", "v2", "--frames", "6", "--texts", "1", "--json", "--threads", "1"]
    assert main(argv + ["--loops", "depth", "--accept", "pcg"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["depth_mode"] == "pcg" and res["loops"] == "depth"
    assert res["temporal_tokens_per_call"] == 1.0, "the temporal loop is AR"


def test_an_ar_temporal_loop_keeps_the_exact_law(tts):
    from codecspec.decode.temporal import Acceptance

    ar = tts.generate("", phonemes=HELLO, seed=4, temporal="ar", mode="ar", decode_audio=False)
    pcg = Acceptance("pcg", theta=0.9)
    same = tts.generate(
        "", phonemes=HELLO, seed=4, temporal="ar", accept=pcg, mode="ar", decode_audio=False
    )
    assert np.array_equal(ar.codes, same.codes)


@pytest.mark.slow
def test_speculative_depth_law_matches_autoregressive_on_the_shipped_model():
    hiddens, c0s = load_frames(MODEL)
    n = 1000
    idx = np.arange(n) % len(c0s)
    h, c = hiddens[idx], c0s[idx]

    def pvalues(dec, seed):
        ar = dec.decode_frames(h, c, cs.Generator(seed, stream=1), "ar")
        spec = dec.decode_frames(h, c, cs.Generator(seed, stream=2), "spec")
        return per_position_pvalues(ar[:, 1:], spec[:, 1:], dec.V)

    good = DepthDecoder.from_dir(MODEL, provider="cpu", threads=1)
    p = pvalues(good, 21)
    assert good.stats.accepted_per_round > 0.01, "speculation must actually be exercised"
    assert p.min() > 1e-4, f"per-position p-values {p}"
    shift = np.random.default_rng(5).standard_normal(good.offsets.shape).astype(np.float32)
    broken = OffsetShiftedVerifier(
        MODEL / "depth.onnx", tree=good.tree, offsets=good.offsets + 4 * shift, provider="cpu"
    )
    assert pvalues(broken, 22).min() < 1e-4, "the broken verifier must be caught"


def test_bad_input(tts):
    with pytest.raises(ValueError, match="language"):
        tts.generate("", phonemes=HELLO, language="fr")
    with pytest.raises(ValueError, match="speaker"):
        tts.generate("", phonemes=HELLO, speaker="nobody")
    with pytest.raises(ValueError, match="mode"):
        tts.generate("", phonemes=HELLO, mode="fast")
    with pytest.raises(ValueError, match="rate"):
        tts.generate("", phonemes=HELLO, rate=0.0)
    with pytest.raises(ValueError, match="temporal"):
        tts.generate("", phonemes=HELLO, temporal="beam")
    with pytest.raises(ValueError, match="accept"):
        tts.generate("", phonemes=HELLO, temporal="spec", accept="greedy")
    with pytest.raises(ValueError, match="draft_len"):
        tts.generate("", phonemes=HELLO, temporal="spec", draft_len=0.5)
