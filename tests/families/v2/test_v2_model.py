"""Reference model v2's PyTorch side on tiny sizes ([train] extra; skipped without torch):
the torch model's losses and sliding window, resumable training, and the checked-in golden
outputs that the torch-free step-graph tests (test_v2_step_graphs.py) compare against.
"""

import dataclasses
import json

import numpy as np
import pytest
from paths import DATA

torch = pytest.importorskip("torch", reason="exercises PyTorch training ([train] extra)")

from tiny_models import (  # noqa: E402
    V2_CODES,
    V2_LEVELS,
    V2_ROWS,
    tiny_v2_configs,
    tiny_v2_model,
)

from codecspec.families.v2.torch_model import CACHE_SLACK, V2Model  # noqa: E402

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


def test_the_checked_in_golden_outputs_are_the_torch_models(tmp_path):
    """tests/data/tiny_v2_golden.npz is what `write_v2_golden` computes today: the torch-free
    step-graph tests compare against the model these weights still build."""

    from tiny_models import write_v2_golden

    want = np.load(DATA / "tiny_v2_golden.npz")
    got = np.load(write_v2_golden(tmp_path / "golden.npz"))
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-5, err_msg=k)


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
    from codecspec.families.v2.train import CKPT_NAME, train_v2
    from codecspec.train.dataset import TTSDataset

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


def test_train_v2_freeze_depth_keeps_the_depth_decoder_and_trains_the_rest(tmp_path):
    """--freeze-depth (a warm start whose depth decoder was trained further alone): the
    depth decoder's weights end as they started, the temporal LM's move."""
    from codecspec.families.v2.train import train_v2
    from codecspec.train.dataset import TTSDataset

    corpus = _corpus(tmp_path / "corpus")
    train = TTSDataset(corpus, corpus / "codes.npz", "train")
    held = TTSDataset(corpus, corpus / "codes.npz", "test", frontend=train.frontend)
    tcfg, dcfg = tiny_v2_configs(train.frontend, window=W)
    torch.manual_seed(0)  # train_v2 seeds the same way before it builds its model
    start = V2Model(tcfg, dcfg).state_dict()
    kw = dict(batch_size=2, depth_frames=8, eval_every=10, val_batches=1, progress=False)
    model, _ = train_v2(
        train, held, tcfg, dcfg, tmp_path / "ck", max_steps=3, freeze_depth=True, **kw
    )
    after = model.state_dict()
    depth = [k for k in after if k.startswith("depth.")]
    assert depth and all(torch.equal(after[k], start[k]) for k in depth)
    assert any(not torch.equal(after[k], start[k]) for k in after if k.startswith("temporal."))


def test_train_v2_after_a_crash_continues_as_if_never_interrupted(tmp_path, monkeypatch):
    """A checkpoint every step, a crash in step 5, a resume: the same weights as one run
    (no dropout, no rate jitter, every frame in the depth loss: nothing random but the data
    order, the optimiser state and the torch RNG, which the checkpoint carries)."""
    from codecspec.families.v2.train import CKPT_NAME, train_v2
    from codecspec.train.dataset import TTSDataset

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
