"""The FSQ model family in PyTorch on tiny sizes ([train] extra; skipped without torch):
training lowers the losses and resumes from its checkpoint, the exported graphs compute what
the torch model computes (one stream and a padded batch), and the stop head ends utterances.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from frame_loop_oracle import FSQDecoder, run_frame_loop

torch = pytest.importorskip(
    "torch", reason="exercises the PyTorch model and its export ([train] extra)"
)

import codecspec as cs  # noqa: E402
from codecspec.codec.data import save_codes  # noqa: E402
from codecspec.families.fsq.model import FSQFrameDecoder, FSQStepper  # noqa: E402
from codecspec.families.fsq.torch_model import (  # noqa: E402
    FSQModelConfig,
    FSQTemporalModel,
    FSQTrainModel,
    export_onnx,
)
from codecspec.families.fsq.train import (  # noqa: E402
    VoiceReferences,
    frames_per_phoneme_token,
    train_fsq,
)
from codecspec.runtime.session import open_session  # noqa: E402
from codecspec.train.dataset import TTSDataset  # noqa: E402

LEVELS, GROUPS = (3, 2), 2
CFG = FSQModelConfig(
    vocab_size=12,
    num_languages=2,
    num_speakers=2,
    levels=LEVELS,
    groups=GROUPS,
    channel_dim=4,
    d_model=32,
    num_heads=2,
    ff_size=64,
    encoder_layers=1,
    decoder_layers=2,
    fourier_bands=4,
    dropout=0.0,
    frames_per_phoneme=1.0,
    ar_dim=16,
    ar_layers=1,
)
PHONEMES = ["ab ba", "abc", "ca b", "bb a c", "ac"]


def _corpus(root):
    """5 texts x 2 renditions; each frame's channels follow the text so there is signal."""
    rows, ids, splits, codes = [], [], [], []
    for t, ph in enumerate(PHONEMES):
        for r in range(2):
            uid, n_frames = f"en-{t}-r{r}", 6 + 2 * t + r
            split = "test" if t == 4 else "train"
            rows.append(
                {
                    "id": uid,
                    "language": "en" if r else "de",
                    "variant": "f1" if r else "m1",
                    "phonemes": ph,
                    "split": split,
                    "num_samples": n_frames * 1280 - 5,
                    "sample_rate": 16000,
                    "duration": n_frames * 0.08,
                }
            )
            frame = np.arange(n_frames)[:, None] + t
            codes.append(np.concatenate([(frame + k) % np.array(LEVELS) for k in range(GROUPS)], 1))
            ids.append(uid)
            splits.append(split)
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    save_codes(root / "codes.npz", ids, splits, codes, 12.5)
    return root


def test_training_lowers_the_losses_and_resumes(tmp_path):
    root = _corpus(tmp_path / "c")
    train = TTSDataset(root, root / "codes.npz", "train", levels=4)
    val = TTSDataset(root, root / "codes.npz", "test", frontend=train.frontend, levels=4)
    cfg = FSQModelConfig(
        **{
            **CFG.to_dict(),
            "vocab_size": len(train.frontend.vocab),
            "frames_per_phoneme": frames_per_phoneme_token(train),
        }
    )
    ck = tmp_path / "ckpt.pt"
    model, log = train_fsq(
        train, val, cfg, max_steps=40, lr=3e-3, eval_every=10, ckpt=ck, progress=False, ar_frames=0
    )
    first, last = log.val[0], log.val[-1]
    assert last["fact"] < first["fact"] and last["ar"] < first["ar"]
    assert np.mean([r["stop"] for r in log.train[-10:]]) < log.train[0]["stop"]
    assert ck.is_file() and log.steps[-1] == 40
    _, log2 = train_fsq(train, val, cfg, max_steps=45, ckpt=ck, progress=False)
    assert log2.steps[-1] == 45 and log2.steps[:40] == log.steps  # continued, not restarted


def test_voice_references_are_other_clips_of_the_same_voice(tmp_path):
    root = _corpus(tmp_path / "c")
    train = TTSDataset(root, root / "codes.npz", "train", levels=4)
    refs = VoiceReferences(train, frames=5, null_prob=0.25)
    refs.codes = [np.full((u.frames, 4), i) for i, u in enumerate(train)]  # source = value
    rng = np.random.default_rng(0)
    ids = [u.id for u in train] * 50
    out = refs.draw(ids, rng)
    assert 0.15 < float(out["use_null"].float().mean()) < 0.35
    for uid, ref, n in zip(ids, out["ref"].numpy(), out["ref_lengths"].numpy()):
        me, src = refs.index[uid], int(ref[0, 0])
        assert src != me and train[src].speaker == train[me].speaker
        assert n == min(5, train[src].frames) and (ref[n:] == 0).all()
    forced = refs.draw(ids[:4], rng, null=False)
    assert not forced["use_null"].any()


def test_a_voice_prefix_model_warm_starts_and_trains(tmp_path):
    """From a checkpoint without a prefix: every shared parameter carried over as it was
    (the speaker rows averaged into one), the prefix's new; training then lowers the
    held-out loss, read with a reference of the same voice."""
    root = _corpus(tmp_path / "c")
    train = TTSDataset(root, root / "codes.npz", "train", levels=4)
    val = TTSDataset(root, root / "codes.npz", "test", frontend=train.frontend, levels=4)
    base = {**CFG.to_dict(), "vocab_size": len(train.frontend.vocab), "ar_layers": 0}
    ck = tmp_path / "base.pt"
    before, _ = train_fsq(train, val, FSQModelConfig(**base), max_steps=5, ckpt=ck, progress=False)
    voiced = FSQModelConfig(**{**base, "num_speakers": 1, "voice_queries": 3})
    model, log = train_fsq(
        train,
        val,
        voiced,
        max_steps=30,
        lr=3e-3,
        eval_every=10,
        init=ck,
        progress=False,
        ckpt=tmp_path / "voiced.pt",
    )
    assert log.val[-1]["fact"] < log.val[0]["fact"]
    fresh = FSQTrainModel(voiced)
    from codecspec.families.fsq.train import warm_start

    missing = warm_start(fresh, ck)
    assert missing and all(
        n.startswith(("temporal.voice.", "temporal.voice_speaker.")) for n in missing
    )
    old = before.state_dict()
    for name, p in fresh.state_dict().items():
        if name.endswith("speaker.weight") and "voice" not in name:
            torch.testing.assert_close(p, old[name].mean(0, keepdim=True))
        elif name in old:
            torch.testing.assert_close(p, old[name])


def test_ar_head_starts_at_the_factorised_nll():
    torch.manual_seed(0)
    m = FSQTrainModel(CFG).eval()
    gen = torch.Generator().manual_seed(0)
    b = _batch(gen)
    with torch.no_grad():
        out = m.losses(b, 0, gen)
    # zero-initialised corrections: AR = factorised exactly, before any training
    assert abs(float(out["ar"]) - float(out["fact"])) < 1e-4


def _batch(gen, B=2, P=9, T=7):
    lv = torch.tensor(CFG.channel_levels)
    lengths = torch.tensor([T, T - 2][:B])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    stop = torch.zeros(B, T)
    stop[torch.arange(B), lengths - 1] = 1.0
    return {
        "phonemes": torch.randint(4, 12, (B, P), generator=gen),
        "phoneme_lengths": torch.tensor([P, P - 3][:B]),
        "language": torch.tensor([0, 1][:B]),
        "speaker": torch.tensor([1, 0][:B]),
        "codes": (torch.rand(B, T, CFG.channels, generator=gen) * lv).long(),
        "frame_mask": mask,
        "stop": stop,
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(1)
    tm = FSQTemporalModel(CFG).eval()
    with torch.no_grad():  # non-trivial biases so a dropped term would show
        for p in tm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    out = tmp_path_factory.mktemp("fsq_onnx")
    export_onnx(tm, out)
    enc = open_session(str(out / "encoder.onnx"), provider="cpu")
    step = open_session(str(out / "step.onnx"), provider="cpu")
    return tm, enc, step


def _stepper(enc, step, b):
    feeds = {k: b[k].numpy() for k in ("phonemes", "phoneme_lengths", "language", "speaker")}
    ck, cv = enc.run(None, feeds)
    return FSQStepper(step, ck, cv, feeds["speaker"], feeds["phoneme_lengths"], 1.0)


@pytest.mark.parametrize("B", [1, 2])
def test_exported_graphs_match_torch_step_by_step(exported, B):
    tm, enc, step = exported
    b = _batch(torch.Generator().manual_seed(2), B=B)
    with torch.no_grad():
        _, ref_ch, ref_stop = tm(
            b["phonemes"], b["phoneme_lengths"], b["language"], b["speaker"], b["codes"]
        )
    st = _stepper(enc, step, b)
    codes = b["codes"].numpy()
    for t in range(codes.shape[1] - 2):  # the real frames of both streams
        _, ch, stop = st.step(codes[:, t - 1] if t else None)
        np.testing.assert_allclose(ch, ref_ch[:, t].numpy(), atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(stop, ref_stop[:, t].numpy(), atol=2e-4, rtol=1e-4)


def _force_stop(tm, bias: float):
    with torch.no_grad():
        tm.decoder.c0_head.bias[-1] = bias
        tm.decoder.c0_head.weight[-1] = 0.0


def test_the_stop_head_ends_utterances(tmp_path):
    torch.manual_seed(3)
    b = _batch(torch.Generator().manual_seed(3))
    dec = FSQDecoder(FSQFrameDecoder(CFG.channel_levels, cs.SamplingParams(0.9, 0, 1.0)))
    gens = [cs.Generator(0).fork(i) for i in range(2)]
    results = {}
    for name, bias in (("stops", 30.0), ("never", -30.0)):
        tm = FSQTemporalModel(CFG).eval()
        _force_stop(tm, bias)
        export_onnx(tm, tmp_path / name)
        enc = open_session(str(tmp_path / name / "encoder.onnx"), provider="cpu")
        step = open_session(str(tmp_path / name / "step.onnx"), provider="cpu")
        results[name] = run_frame_loop(_stepper(enc, step, b), dec, gens, max_frames=12)
    assert [len(c) for c in results["stops"].codes] == [1, 1]
    assert not results["stops"].hit_max_frames
    assert results["never"].hit_max_frames and results["never"].steps == 12


# ---- the v3 recipe: levels per group and espeak-ng's phoneme track ---------------------------
ALIGNED = FSQModelConfig(
    **{**CFG.to_dict(), "levels": ((5, 3), (2, 2)), "ar_layers": 0, "aligned": True}
)


def _track(B, T, P):
    """Phoneme positions rising through each stream's phonemes (1 = the first after BOS)."""
    return torch.stack([torch.linspace(1.0, p - 1.2, T) for p in [P, P - 3][:B]])


@pytest.mark.parametrize("B", [1, 2])
def test_an_aligned_model_with_levels_per_group_exports_what_torch_computes(tmp_path, B):
    torch.manual_seed(4)
    tm = FSQTemporalModel(ALIGNED).eval()
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    export_onnx(tm, tmp_path)
    enc = open_session(str(tmp_path / "encoder.onnx"), provider="cpu")
    step = open_session(str(tmp_path / "step.onnx"), provider="cpu")
    gen = torch.Generator().manual_seed(5)
    b = _batch(gen, B=B)
    lv = torch.tensor(ALIGNED.channel_levels)
    b["codes"] = (torch.rand(B, 7, ALIGNED.channels, generator=gen) * lv).long()
    track = _track(B, 7, 9)
    with torch.no_grad():
        _, ref_ch, ref_stop = tm(
            *(b[k] for k in ("phonemes", "phoneme_lengths", "language", "speaker", "codes")), track
        )
        _, off_ch, _ = tm(
            *(b[k] for k in ("phonemes", "phoneme_lengths", "language", "speaker", "codes")),
            track + 2.0,
        )
    assert ref_ch.shape[-1] == sum(ALIGNED.channel_levels) == 12
    assert float((ref_ch - off_ch).abs().max()) > 1e-3, "the track moves the logits"
    feeds = {k: b[k].numpy() for k in ("phonemes", "phoneme_lengths", "language", "speaker")}
    ck, cv = enc.run(None, feeds)
    tracks = [track[i].numpy() for i in range(B)]
    st = FSQStepper(step, ck, cv, feeds["speaker"], feeds["phoneme_lengths"], 1.0, tracks=tracks)
    codes = b["codes"].numpy()
    for t in range(5):
        _, ch, stop = st.step(codes[:, t - 1] if t else None)
        np.testing.assert_allclose(ch, ref_ch[:, t].numpy(), atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(stop, ref_stop[:, t].numpy(), atol=2e-4, rtol=1e-4)


def test_an_aligned_model_needs_its_track_and_trains_on_it():
    torch.manual_seed(6)
    m = FSQTrainModel(ALIGNED)
    assert m.ar is None
    b = _batch(torch.Generator().manual_seed(6))
    b["codes"] = b["codes"] % torch.tensor(ALIGNED.channel_levels)
    with pytest.raises(ValueError, match="track"):
        m.losses(b, 0, torch.Generator())
    out = m.losses(b | {"track": _track(2, 7, 9)}, 0, torch.Generator())
    assert float(out["ar"]) == 0.0 and torch.isfinite(out["fact"])
    with pytest.raises(ValueError, match="ar_layers"):
        FSQModelConfig(**{**ALIGNED.to_dict(), "ar_layers": 1})
