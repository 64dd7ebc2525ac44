"""Reference model v2's exported step graphs over the ring cache, without torch (CI runs
these): the checked-in tiny folder (tests/data/tiny_v2) against the torch teacher-forced
outputs of the same weights (tests/data/tiny_v2_golden.npz, written with the folder by
`python tests/tiny_models.py`), multi-frame scoring, rejected drafts, and V2TTS's checks of a
folder (stop head, guard, missing files, windows).

The important property: "the ring cache equals the full cache inside the window and equals
the windowed reference beyond it", frame by frame and for n frames scored in one call.
"""

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from paths import DATA
from tiny_models import V2_CODES, V2_GOLDEN_FRAMES, V2_LEVELS

from codecspec.families.v2.model import V2_FILES, V2TTS, WINDOW_KEY, V2Stepper
from codecspec.runtime.session import open_session

DATA = DATA
FIXTURE = DATA / "tiny_v2"
W = 4  # the tiny model's window
T = V2_GOLDEN_FRAMES  # frames: past the ring's capacity twice
P = 9  # phoneme tokens with bos/eos
ATOL = 1e-4  # float32 graphs against torch
PHONEMES = "həlˈoʊ wˈɜːld"


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(DATA / "tiny_v2_golden.npz"))


def _steppers(folder, b, draft=False):
    """A maker of fresh V2Steppers over the target (or draft) graph for utterance b."""
    enc = open_session(str(folder / "encoder.onnx"), "cpu")
    kv = enc.run(None, {k: b[k] for k in ("phonemes", "language", "speaker")})
    ck, cv = (kv[2], kv[3]) if draft else (kv[0], kv[1])
    sess = open_session(str(folder / ("draft_temporal.onnx" if draft else "temporal.onnx")), "cpu")
    rate_frames = float(b["frames_per_phoneme"][0]) * (P - 2)

    def make():
        return V2Stepper(sess, ck, cv, int(b["speaker"][0]), rate_frames, V2_CODES, W)

    return make


def _prev_tokens(b):
    return np.concatenate([[V2_CODES], b["c0"][0, :-1]]).astype(np.int64)


@pytest.mark.parametrize("draft", [False, True], ids=["temporal", "draft_temporal"])
def test_ring_cache_steps_match_the_windowed_torch_forward(golden, draft):
    b = golden
    want_logits, want_stop = (
        (b["draft_logits"], b["draft_stop"]) if draft else (b["logits"], b["stop"])
    )
    step = _steppers(FIXTURE, b, draft)()
    assert step.window == W
    prev = _prev_tokens(b)
    for t in range(T):
        out = step.score(prev[t : t + 1])
        np.testing.assert_allclose(out[1][0], want_logits[0, t], atol=ATOL, err_msg=t)
        np.testing.assert_allclose(out[2][0], want_stop[0, t], atol=ATOL, err_msg=t)
        if not draft:
            np.testing.assert_allclose(out[0][0], b["h"][0, t], atol=ATOL, err_msg=t)
        step.commit(out, 1)
    # the ring holds the last C frames, frame t in slot t % C
    C = step.cache.capacity
    assert T > 2 * C  # eviction happened, more than once
    held = np.arange(T - C, T)
    np.testing.assert_array_equal(step.cache.positions[held % C], held)
    assert step.t == T


def test_ring_cache_differs_from_the_full_cache_beyond_the_window(golden):
    """The graphs reproduce the windowed model, not a full-attention one (not vacuous)."""
    b = golden
    step = _steppers(FIXTURE, b)()
    prev = _prev_tokens(b)
    got = []
    for t in range(T):
        out = step.score(prev[t : t + 1])
        step.commit(out, 1)
        got.append(out[1][0])
    diff = np.abs(np.array(got) - b["logits_full"][0]).max(axis=-1)
    assert diff[:W].max() < ATOL and diff[W:].min() > 10 * ATOL, diff


@pytest.mark.parametrize("start,n", [(0, 3), (3, 5), (6, 2)])
def test_scoring_n_frames_in_one_call_equals_n_steps(golden, start, n):
    make = _steppers(FIXTURE, golden)
    prev = _prev_tokens(golden)
    one, many = make(), make()
    for s in (one, many):  # the same history of `start` frames
        for t in range(start):
            s.commit(s.score(prev[t : t + 1]), 1)
    got = many.score(prev[start : start + n])
    assert got[1].shape == (n, V2_CODES) and got[3].shape[3] == n
    for i in range(n):
        want = one.score(prev[start + i : start + i + 1])
        one.commit(want, 1)
        for k in range(3):  # hidden, c0 logits, stop logits
            np.testing.assert_allclose(got[k][i], want[k][0], atol=ATOL, err_msg=(i, k))
        for k in (3, 4):  # the new K/V the commit stores
            np.testing.assert_allclose(got[k][:, :, :, i], want[k][:, :, :, 0], atol=ATOL)
    many.commit(got, n)
    assert many.t == one.t
    nxt = prev[start + n : start + n + 1]  # the next frame reads the same cache
    np.testing.assert_allclose(many.score(nxt)[1], one.score(nxt)[1], atol=ATOL)


def _rejected_drafts_run(golden, k, n, commit_rows):
    """Max |logit difference| over frames 3 + k .. T between a stepper that scored n drafts
    and kept `commit_rows` of them (the first k are accepted), and one that scored only the k
    accepted drafts."""
    make = _steppers(FIXTURE, golden)
    prev = _prev_tokens(golden)
    drafts = np.random.default_rng(k * 10 + n).integers(0, V2_CODES, n)
    drafts[0] = prev[3]  # frame 3's real previous token; later ones are drafted guesses
    scored, exact = make(), make()
    for s in (scored, exact):
        for t in range(3):
            s.commit(s.score(prev[t : t + 1]), 1)
    out = scored.score(drafts)
    scored.cache.commit(out[3], out[4], 3 + np.arange(commit_rows, dtype=np.int64))
    scored.t += k
    if k:
        exact.commit(exact.score(drafts[:k]), k)  # only the k accepted were scored
    assert scored.t == exact.t == 3 + k
    worst = 0.0
    for t in range(3 + k, T):  # continue on the real tokens, past a full window
        a, e = scored.score(prev[t : t + 1]), exact.score(prev[t : t + 1])
        worst = max(worst, *(float(np.abs(a[i] - e[i]).max()) for i in range(3)))
        scored.commit(a, 1)
        exact.commit(e, 1)
    return worst


@pytest.mark.parametrize("k,n", [(0, 3), (1, 3), (2, 5), (5, 5)])
def test_rejected_drafts_leave_no_trace_in_the_cache(golden, k, n):
    assert _rejected_drafts_run(golden, k, n, commit_rows=k) < ATOL
    if k < n:  # the same check catches a commit that keeps the rejected drafts' K/V too
        assert _rejected_drafts_run(golden, k, n, commit_rows=n) > 100 * ATOL


# ---------------------------------------------------------------------- V2TTS
def test_v2tts_generates_codes_within_the_guard():
    tts = V2TTS(FIXTURE, provider="cpu")
    assert tts.window == W
    s = tts.generate("", phonemes=PHONEMES, max_frames=5, mode="ar", decode_audio=False)
    assert s.codes.shape == (5, V2_LEVELS) and s.max_frames == 5 and s.hit_max_frames
    assert s.codes.min() >= 0 and s.codes.max() < V2_CODES
    again = tts.generate("", phonemes=PHONEMES, max_frames=5, mode="ar", decode_audio=False)
    np.testing.assert_array_equal(again.codes, s.codes)  # the same seed, the same codes
    auto = tts.generate("", phonemes=PHONEMES, max_frames=5, decode_audio=False)
    assert auto.mode == "ar"  # "auto" without a device profile: AR (calibrate.decision)
    spec = tts.generate("", phonemes=PHONEMES, max_frames=5, mode="spec", decode_audio=False)
    assert spec.mode == "spec" and spec.codes.shape == (5, V2_LEVELS)


def _with_stop_bias(folder, bias: float):
    """The stop heads' bias set in both step graphs (the checked-in one never stops)."""
    for name in ("temporal.onnx", "draft_temporal.onnx"):
        m = onnx.load(str(folder / name))
        (init,) = [i for i in m.graph.initializer if i.name.endswith("stop_head.bias")]
        init.CopyFrom(numpy_helper.from_array(np.full((1,), bias, np.float32), init.name))
        onnx.save(m, str(folder / name))
    return folder


@pytest.mark.parametrize("bias,frames,hit", [(50.0, 1, False), (None, 9, True)])
def test_v2tts_stop_head_or_guard_ends_the_utterance(tmp_path, bias, frames, hit):
    d = shutil.copytree(FIXTURE, tmp_path / "m")
    if bias is not None:
        _with_stop_bias(d, bias)
    tts = V2TTS(d, provider="cpu")
    s = tts.generate("", phonemes=PHONEMES, max_frames=9, mode="ar", decode_audio=not hit)
    assert s.codes.shape == (frames, V2_LEVELS)
    assert s.hit_max_frames is hit
    if not hit:  # codec v2 renders the frame
        assert s.wav is not None and len(s.wav) > 0
    else:  # the default guard: max_pace times the length the rate announces, plus 8
        s = tts.generate("", phonemes=PHONEMES, mode="ar", decode_audio=False)
        n = len(tts.frontend.vocab.encode(PHONEMES))
        assert s.max_frames == tts.max_frames_for(tts.expected_frames(n, "en"))
        assert s.hit_max_frames and s.codes.shape == (s.max_frames, V2_LEVELS)


def test_v2tts_names_the_missing_files(tmp_path):
    d = shutil.copytree(FIXTURE, tmp_path / "m")
    (d / "depth.heads.npy").unlink()
    (d / "temporal.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="temporal.onnx") as e:
        V2TTS(d, provider="cpu")
    assert "depth.heads.npy" in str(e.value) and "codec_v2.npz" not in str(e.value)
    assert set(V2_FILES) >= {"depth.heads.npy", "temporal.onnx"}


def test_v2tts_rejects_a_window_the_graph_does_not_have(tmp_path):
    d = shutil.copytree(FIXTURE, tmp_path / "m")
    meta = json.loads((d / "model.json").read_text())
    meta["temporal_config"]["window"] = W + 2
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"^model_dir: temporal\.onnx attends .* window 6"):
        V2TTS(d, provider="cpu")


def test_v2tts_rejects_a_draft_graph_of_another_window(tmp_path):
    d = shutil.copytree(FIXTURE, tmp_path / "m")
    m = onnx.load(str(d / "draft_temporal.onnx"))
    (entry,) = [p for p in m.metadata_props if p.key == WINDOW_KEY]
    entry.value = str(W + 2)
    onnx.save(m, str(d / "draft_temporal.onnx"))
    tts = V2TTS(d, provider="cpu")  # the draft graph opens on first use
    with pytest.raises(ValueError, match=r"^model_dir: draft_temporal\.onnx attends .* window"):
        _ = tts.draft
