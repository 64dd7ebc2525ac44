"""Reference model v2 on tiny sizes ([train] extra; skipped without torch): the torch model's
losses and sliding window, the exported step graphs over the ring cache against the torch
teacher-forced forward, multi-frame scoring, resumable training and the V2TTS folder checks.

The important property: "the ring cache equals the full cache inside the window and equals
the windowed reference beyond it", frame by frame and for n frames scored in one call.
"""

import dataclasses
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tiny_models import (  # noqa: E402
    V2_CODES,
    V2_LEVELS,
    V2_ROWS,
    tiny_v2_configs,
    tiny_v2_folder,
    tiny_v2_model,
)

from codecspec.runtime.session import open_session  # noqa: E402
from codecspec.train.v2_torch import CACHE_SLACK, V2Model  # noqa: E402
from codecspec.tts.v2 import V2_FILES, V2TTS, V2Stepper  # noqa: E402

W = 4  # the tiny model's window
P = 9  # phoneme tokens with bos/eos
T = 2 * (W + CACHE_SLACK) + 3  # frames: past the ring's capacity twice
RATE = 1.3  # frames per phoneme, the rate input
ATOL = 1e-4  # float32 graphs against torch


def _batch(cfg, gen, B=2, P=P, T=T) -> dict:
    lengths = torch.tensor([T, T - 3][:B])
    idx = torch.arange(T)[None, :]
    return {
        "phonemes": torch.randint(4, cfg.vocab_size, (B, P), generator=gen),
        "phoneme_lengths": torch.tensor([P, P - 3][:B]),
        "language": torch.tensor([0, 1][:B]),
        "speaker": torch.tensor([1, 0][:B]),
        "frames_per_phoneme": torch.tensor([RATE, 0.8][:B]),
        "frame_mask": idx < lengths[:, None],
        "is_last": idx == (lengths[:, None] - 1),
        "codes": torch.randint(0, cfg.c0_vocab_size, (B, T, V2_LEVELS), generator=gen),
    }


def _forward(tm, b):
    with torch.no_grad():
        return tm(
            b["phonemes"],
            b["phoneme_lengths"],
            b["language"],
            b["speaker"],
            b["codes"][..., 0],
            b["frames_per_phoneme"],
        )


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny models run fastest on one thread (and the machine is shared), like onnxruntime's
    pool in conftest.py."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny v2 model folder; its weights are `tiny_v2_model()`'s."""
    return tiny_v2_folder(tmp_path_factory.mktemp("v2") / "model", window=W)


def _reference(model):
    """One utterance (B = 1) and the torch teacher-forced outputs with the window."""
    b = _batch(model.temporal.cfg, torch.Generator().manual_seed(3), B=1)
    return b, _forward(model.temporal, b)


def _steppers(folder, b, draft=False):
    """A fresh V2Stepper over the exported target (or draft) graph for utterance b."""
    enc = open_session(str(folder / "encoder.onnx"), "cpu")
    kv = enc.run(None, {k: b[k].numpy() for k in ("phonemes", "language", "speaker")})
    ck, cv = (kv[2], kv[3]) if draft else (kv[0], kv[1])
    sess = open_session(str(folder / ("draft_temporal.onnx" if draft else "temporal.onnx")), "cpu")
    start = V2_CODES

    def make():
        rate_frames = float(b["frames_per_phoneme"][0]) * (P - 2)
        return V2Stepper(sess, ck, cv, int(b["speaker"][0]), rate_frames, start, W)

    return make


def _prev_tokens(b):
    c0 = b["codes"][0, :, 0].numpy()
    return np.concatenate([[V2_CODES], c0[:-1]]).astype(np.int64)


# ---------------------------------------------------------------------- torch model
def test_losses_are_finite_and_training_lowers_them():
    tcfg, dcfg = tiny_v2_configs(window=W)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = V2Model(tcfg, dcfg).train()
    batch = _batch(tcfg, gen)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(25):
        out = model.losses(batch, depth_frames=8, gen=gen)
        for k in ("c0", "draft_c0", "draft_kl", "draft", "stop", "draft_stop", "depth"):
            assert torch.isfinite(out[k]), k
        loss = out["c0"] + out["draft"] + out["stop"] + out["draft_stop"] + out["depth"]
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters()), (
            "non-finite gradient"
        )
        opt.step()
    assert loss.item() < 0.7 * first
    assert out["depth_levels"].shape == (V2_LEVELS - 1,)
    assert 0.0 < float(out["accept"]) <= 1.0 + 1e-6
    # every part of the model gets a gradient from the losses
    unused = [n for n, p in model.named_parameters() if p.grad is None]
    assert unused == []


def test_v2_model_rejects_mismatched_depth_configs():
    tcfg, dcfg = tiny_v2_configs(window=W)
    with pytest.raises(ValueError, match="input width"):
        V2Model(dataclasses.replace(tcfg, d_model=64), dcfg)
    with pytest.raises(ValueError, match="c0 vocabulary"):
        V2Model(dataclasses.replace(tcfg, c0_vocab_size=64), dcfg)
    with pytest.raises(ValueError, match="window"):
        dataclasses.replace(tcfg, window=0)


def test_sliding_window_only_changes_frames_past_the_window():
    model = tiny_v2_model(window=W, seed=1)
    full = V2Model(dataclasses.replace(model.temporal.cfg, window=T), model.depth.c).eval()
    full.load_state_dict(model.state_dict())
    b = _batch(model.temporal.cfg, torch.Generator().manual_seed(2))
    h_w, logits_w, stop_w, *_ = _forward(model.temporal, b)
    h_f, logits_f, stop_f, *_ = _forward(full.temporal, b)
    for a, f in ((h_w, h_f), (logits_w, logits_f), (stop_w, stop_f)):
        np.testing.assert_allclose(a[:, :W].numpy(), f[:, :W].numpy(), atol=1e-5)
    # beyond the window frame t no longer sees frame t - W: every later frame changes
    diff = (logits_w - logits_f).abs().amax(dim=-1)[0]  # [T]
    assert bool((diff[W:] > 1e-4).all()), diff
    assert float((h_w - h_f)[:, W:].abs().max()) > 1e-3


# ---------------------------------------------------------------------- step graphs
@pytest.mark.parametrize("draft", [False, True], ids=["temporal", "draft_temporal"])
def test_ring_cache_steps_match_the_windowed_torch_forward(folder, draft):
    model = tiny_v2_model(window=W)
    b, (h, logits, stop, d_logits, d_stop, _) = _reference(model)
    want_logits, want_stop = (d_logits, d_stop) if draft else (logits, stop)
    step = _steppers(folder, b, draft)()
    assert step.window == W
    prev = _prev_tokens(b)
    for t in range(T):
        out = step.score(prev[t : t + 1])
        np.testing.assert_allclose(out[1][0], want_logits[0, t].numpy(), atol=ATOL, err_msg=t)
        np.testing.assert_allclose(out[2][0], want_stop[0, t].numpy(), atol=ATOL, err_msg=t)
        if not draft:
            np.testing.assert_allclose(out[0][0], h[0, t].numpy(), atol=ATOL, err_msg=t)
        step.commit(out, 1)
    # the ring holds the last C frames (C = W + CACHE_SLACK), frame t in slot t % C
    C = step.cache.capacity
    assert C == W + CACHE_SLACK and T > 2 * C  # eviction happened, more than once
    held = np.arange(T - C, T)
    np.testing.assert_array_equal(step.cache.positions[held % C], held)
    assert step.t == T


def test_ring_cache_differs_from_the_full_cache_beyond_the_window(folder):
    """The graphs reproduce the windowed model, not a full-attention one (not vacuous)."""
    model = tiny_v2_model(window=W)
    full = V2Model(dataclasses.replace(model.temporal.cfg, window=T), model.depth.c).eval()
    full.load_state_dict(model.state_dict())
    b, _ = _reference(model)
    _, logits_full, *_ = _forward(full.temporal, b)
    step = _steppers(folder, b)()
    prev = _prev_tokens(b)
    got = []
    for t in range(T):
        out = step.score(prev[t : t + 1])
        step.commit(out, 1)
        got.append(out[1][0])
    diff = np.abs(np.array(got) - logits_full[0].numpy()).max(axis=-1)
    assert diff[:W].max() < ATOL and diff[W:].min() > 10 * ATOL, diff


@pytest.mark.parametrize("start,n", [(0, 3), (3, 5), (6, 2)])
def test_scoring_n_frames_in_one_call_equals_n_steps(folder, start, n):
    model = tiny_v2_model(window=W)
    b, _ = _reference(model)
    make = _steppers(folder, b)
    prev = _prev_tokens(b)
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


@pytest.mark.parametrize("k,n", [(0, 3), (1, 3), (2, 5), (5, 5)])
def test_rejected_drafts_leave_no_trace_in_the_cache(folder, k, n):
    model = tiny_v2_model(window=W)
    b, _ = _reference(model)
    make = _steppers(folder, b)
    prev = _prev_tokens(b)
    drafts = np.random.default_rng(k * 10 + n).integers(0, V2_CODES, n)
    drafts[0] = prev[3]  # frame 3's real previous token; later ones are drafted guesses
    scored, exact = make(), make()
    for s in (scored, exact):
        for t in range(3):
            s.commit(s.score(prev[t : t + 1]), 1)
    scored.commit(scored.score(drafts), k)  # n scored, the first k accepted
    if k:
        exact.commit(exact.score(drafts[:k]), k)  # only the k accepted were scored
    assert scored.t == exact.t == 3 + k
    np.testing.assert_array_equal(scored.cache.positions, exact.cache.positions)
    for t in range(3 + k, T):  # continue on the real tokens, past a full window
        a, e = scored.score(prev[t : t + 1]), exact.score(prev[t : t + 1])
        for i in range(3):
            np.testing.assert_allclose(a[i], e[i], atol=ATOL, err_msg=(t, i))
        scored.commit(a, 1)
        exact.commit(e, 1)


# ---------------------------------------------------------------------- training
def _corpus(path, seed=0):
    from codecspec.codec.data import save_codes

    path.mkdir(parents=True, exist_ok=True)
    with open(path / "manifest.jsonl", "w", encoding="utf-8") as f:
        for r in V2_ROWS:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    rng = np.random.default_rng(seed)
    codes = [rng.integers(0, V2_CODES, (int(rng.integers(5, 9)), V2_LEVELS)) for _ in V2_ROWS]
    save_codes(
        path / "codes.npz", [r["id"] for r in V2_ROWS], [r["split"] for r in V2_ROWS], codes, 12.5
    )
    return path


def test_train_v2_resumes_where_it_stopped(tmp_path, capsys):
    from codecspec.train.v2_train import CKPT_NAME, train_v2
    from codecspec.tts.dataset import TTSDataset

    corpus = _corpus(tmp_path / "corpus")
    train = TTSDataset(corpus, corpus / "codes.npz", "train")
    held = TTSDataset(corpus, corpus / "codes.npz", "test", frontend=train.frontend)
    tcfg, dcfg = tiny_v2_configs(train.frontend, window=W)
    ckpt = tmp_path / "ckpt"
    kw = dict(batch_size=2, depth_frames=8, eval_every=2, val_batches=1, progress=False)
    _, log3 = train_v2(train, held, tcfg, dcfg, ckpt, max_steps=3, **kw)
    assert log3.steps == [1, 2, 3]
    ck3 = torch.load(ckpt / CKPT_NAME, map_location="cpu", weights_only=False)
    assert ck3["step"] == 3
    capsys.readouterr()

    model, log5 = train_v2(train, held, tcfg, dcfg, ckpt, max_steps=5, **kw)
    assert "resuming" in capsys.readouterr().err
    assert log5.steps == [1, 2, 3, 4, 5]
    assert log5.train[:3] == log3.train  # the curves continue
    assert log5.seconds == sorted(log5.seconds) and log5.seconds[:3] == log3.seconds
    assert log5.val_steps == [2, 3, 4, 5]
    ck5 = torch.load(ckpt / CKPT_NAME, map_location="cpu", weights_only=False)
    assert ck5["step"] == 5
    # the optimiser resumed too: AdamW's step count went on from 3
    assert {int(s["step"]) for s in ck5["optimizer"]["state"].values()} == {5}
    assert (ckpt / "train.json").is_file()
    for k, v in model.state_dict().items():
        assert torch.equal(v, ck5["state_dict"][k]), k

    other = dataclasses.replace(tcfg, window=W + 1)
    with pytest.raises(ValueError, match="ckpt_dir"):
        train_v2(train, held, other, dcfg, ckpt, max_steps=6, **kw)


# ---------------------------------------------------------------------- V2TTS
PHONEMES = "həlˈoʊ wˈɜːld"


def test_v2tts_generates_codes_within_the_guard(folder):
    tts = V2TTS(folder, provider="cpu")
    assert tts.window == W
    s = tts.generate("", phonemes=PHONEMES, max_frames=5, mode="ar", decode_audio=False)
    assert s.codes.ndim == 2 and s.codes.shape[1] == V2_LEVELS
    assert 1 <= len(s.codes) <= 5 and s.max_frames == 5
    assert s.codes.min() >= 0 and s.codes.max() < V2_CODES
    if len(s.codes) < 5:  # the stop head ended it, not the guard
        assert not s.hit_max_frames
    again = tts.generate("", phonemes=PHONEMES, max_frames=5, mode="ar", decode_audio=False)
    np.testing.assert_array_equal(again.codes, s.codes)  # the same seed, the same codes
    spec = tts.generate("", phonemes=PHONEMES, max_frames=5, decode_audio=False)
    assert spec.mode == "spec"  # "auto" without a device profile
    assert spec.codes.shape[1] == V2_LEVELS and 1 <= len(spec.codes) <= 5


@pytest.mark.parametrize("bias,frames,hit", [(50.0, 1, False), (-50.0, 9, True)])
def test_v2tts_stop_head_or_guard_ends_the_utterance(tmp_path, bias, frames, hit):
    d = tiny_v2_folder(tmp_path / "m", window=W, stop_bias=bias)
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


def test_v2tts_names_the_missing_files(folder, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(folder, d)
    (d / "depth.heads.npy").unlink()
    (d / "temporal.onnx").unlink()
    with pytest.raises(FileNotFoundError, match="temporal.onnx") as e:
        V2TTS(d, provider="cpu")
    assert "depth.heads.npy" in str(e.value) and "codec_v2.npz" not in str(e.value)
    assert set(V2_FILES) >= {"depth.heads.npy", "temporal.onnx"}


def test_v2tts_rejects_a_window_the_graph_does_not_have(folder, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(folder, d)
    meta = json.loads((d / "model.json").read_text())
    meta["temporal_config"]["window"] = W + 2
    (d / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="window"):
        V2TTS(d, provider="cpu")


def test_v2tts_rejects_a_draft_graph_of_another_window(folder, tmp_path):
    from codecspec.train.v2_torch import export_onnx

    d = tmp_path / "m"
    shutil.copytree(folder, d)
    other = tmp_path / "other"
    other.mkdir()
    export_onnx(tiny_v2_model(window=W + 2).temporal, other)
    shutil.copy(other / "draft_temporal.onnx", d / "draft_temporal.onnx")
    tts = V2TTS(d, provider="cpu")  # the draft graph opens on first use
    with pytest.raises(ValueError, match="window"):
        _ = tts.draft


def test_train_v2_after_a_crash_continues_as_if_never_interrupted(tmp_path, monkeypatch):
    """A checkpoint every step, a crash in step 5, a resume: the same weights as one run
    (no dropout, no rate jitter, every frame in the depth loss: nothing random but the data
    order, the optimiser state and the torch RNG, which the checkpoint carries)."""
    from codecspec.train.v2_train import CKPT_NAME, train_v2
    from codecspec.tts.dataset import TTSDataset

    corpus = _corpus(tmp_path / "corpus")
    train = TTSDataset(corpus, corpus / "codes.npz", "train")
    held = TTSDataset(corpus, corpus / "codes.npz", "test", frontend=train.frontend)
    tcfg, dcfg = tiny_v2_configs(train.frontend, window=W)
    kw = dict(
        max_steps=6,
        batch_size=1,  # 3 batches an epoch: the crash is mid-epoch
        depth_frames=0,
        rate_jitter=0.0,
        eval_every=100,
        val_batches=1,
        save_every=-1.0,
        progress=False,
    )
    whole, log_whole = train_v2(train, held, tcfg, dcfg, tmp_path / "one", **kw)

    calls = {"n": 0}
    losses = V2Model.losses

    def crashing(self, *a, **k):
        if self.training:
            calls["n"] += 1
            if calls["n"] == 5:
                raise KeyboardInterrupt("simulated crash")
        return losses(self, *a, **k)

    monkeypatch.setattr(V2Model, "losses", crashing)
    with pytest.raises(KeyboardInterrupt):
        train_v2(train, held, tcfg, dcfg, tmp_path / "two", **kw)
    ck = torch.load(tmp_path / "two" / CKPT_NAME, map_location="cpu", weights_only=False)
    assert (ck["step"], ck["epoch"], ck["batch_in_epoch"]) == (4, 1, 1)
    monkeypatch.setattr(V2Model, "losses", losses)
    resumed, log_resumed = train_v2(train, held, tcfg, dcfg, tmp_path / "two", **kw)
    assert log_resumed.steps == log_whole.steps == [1, 2, 3, 4, 5, 6]
    assert log_resumed.train == log_whole.train
    for k, v in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[k], v, rtol=0, atol=1e-6, msg=k)
