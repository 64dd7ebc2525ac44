"""`train_depth`'s distillation and resumable state (the shared depth decoder's long runs).

A resumed run is the uninterrupted run, step for step; a resume that forgets the batch
sampler's state is a different run and must be told apart. Distillation moves the student
toward the teacher's distributions, which plain cross-entropy on one code per level does not
do as fast."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="exercises the PyTorch model ([train] extra)")

from codecspec.graphs import DepthDecoderConfig  # noqa: E402
from codecspec.train import depth_train  # noqa: E402
from codecspec.train.depth_train import train_depth  # noqa: E402
from codecspec.train.networks import DepthModel, SharedDepthModel  # noqa: E402

CFG = DepthDecoderConfig(
    num_layers=1,
    hidden_size=16,
    num_heads=2,
    num_kv_heads=1,
    head_dim=8,
    intermediate_size=32,
    num_codebooks=4,
    codebook_size=16,
    c0_vocab_size=16,
    num_draft_offsets=2,
    max_positions=8,
)


def _frames(n: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n, CFG.hidden_size)).astype(np.float32)
    codes = rng.integers(0, CFG.codebook_size, (n, CFG.num_codebooks))
    return h, codes


def _weights(m) -> dict:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _fresh(seed: int = 0) -> SharedDepthModel:
    torch.manual_seed(seed)
    return SharedDepthModel(CFG)


def test_a_stopped_run_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    h, codes = _frames()
    kw = dict(steps=12, batch=16, lr=3e-3, seed=5)
    whole = _fresh()
    full = train_depth(whole, h, codes, **kw)

    state = tmp_path / "state.pt"
    part = _fresh()
    stop_after = 7

    def stopping_save(path, key, step, *rest):  # the run is killed right after step 7's save
        real_save(path, key, step, *rest)
        if step == stop_after:
            raise KeyboardInterrupt

    real_save = depth_train._save
    monkeypatch.setattr(depth_train, "_save", stopping_save)
    with pytest.raises(KeyboardInterrupt):
        train_depth(part, h, codes, state=state, save_every=stop_after, **kw)
    monkeypatch.setattr(depth_train, "_save", real_save)
    at_stop = torch.load(state, map_location="cpu", weights_only=False)  # the resume rewrites it
    resumed = _fresh(seed=99)  # other initial weights: everything must come from the state
    out = train_depth(resumed, h, codes, state=state, save_every=stop_after, **kw)
    assert out["train_loss"] == full["train_loss"]
    for name, w in _weights(whole).items():
        torch.testing.assert_close(_weights(resumed)[name], w, rtol=0, atol=0, msg=name)

    # broken variant: a resume that restores weights and optimiser but not the sampler
    # draws other batches after the stop, so its run differs from the uninterrupted one
    assert at_stop["step"] == stop_after
    at_stop["gen"] = torch.Generator().manual_seed(kw["seed"]).get_state()
    torch.save(at_stop, state)
    forgetful = _fresh()
    out = train_depth(forgetful, h, codes, state=state, **kw)
    assert out["train_loss"][:stop_after] == full["train_loss"][:stop_after]
    assert out["train_loss"][stop_after:] != full["train_loss"][stop_after:]


def test_a_state_of_another_run_is_refused(tmp_path):
    h, codes = _frames()
    state = tmp_path / "state.pt"
    train_depth(_fresh(), h, codes, steps=2, batch=8, state=state)
    with pytest.raises(ValueError, match="state"):
        train_depth(_fresh(), h, codes, steps=3, batch=8, state=state)


def _kl(teacher, student, h, codes) -> float:
    with torch.no_grad():
        t = teacher(h, codes).log_softmax(-1)
        s = student(h, codes).log_softmax(-1)
    return float((t.exp() * (t - s)).sum(-1).mean())


def test_distillation_moves_the_student_toward_the_teacher():
    h, codes = _frames(512)
    torch.manual_seed(1)
    teacher = DepthModel(CFG).eval()
    with torch.no_grad():  # a confident teacher, far from a fresh student's flat outputs
        for p in teacher.parameters():
            p.mul_(2.0)
    ht, ct = torch.as_tensor(h), torch.as_tensor(codes)
    kw = dict(steps=60, batch=64, lr=1e-2, seed=0)
    torch.manual_seed(2)
    plain = DepthModel(CFG)  # the teacher's own shape: distillation can reach it
    taught = DepthModel(CFG)
    taught.load_state_dict(plain.state_dict())
    train_depth(plain, h, codes, **kw)
    train_depth(taught, h, codes, teacher=teacher, distill=1.0, **kw)
    assert _kl(teacher, taught, ht, ct) < 0.25 * _kl(teacher, plain, ht, ct)


def test_bad_distillation_arguments():
    h, codes = _frames(32)
    with pytest.raises(ValueError, match="distill"):
        train_depth(_fresh(), h, codes, steps=1, distill=0.5)  # no teacher
    with pytest.raises(ValueError, match="distill"):
        train_depth(_fresh(), h, codes, steps=1, teacher=DepthModel(CFG), distill=1.5)


def _recipe(name: str):
    """models/recipe/<name>.py as a module (the recipe imports its sibling scripts)."""
    import importlib
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "models" / "recipe"
    if not (folder / f"{name}.py").exists():
        pytest.skip("no models/recipe in this checkout")
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


def test_phone_context_reads_the_tracks_phoneme_and_its_neighbours():
    """The depth probe's phoneme context: for each frame, the ids at floor(u) - w .. floor(u) + w
    of the phoneme tensor (the pad id past either end), then the position inside the phoneme."""
    v2 = _recipe("v2")
    rng = np.random.default_rng(0)
    phonemes = torch.from_numpy(rng.integers(0, 80, (3, 7)))
    track = torch.from_numpy(rng.uniform(0, 7, (3, 5))).float()
    got = v2.phone_context(phonemes, track, 2).numpy()
    assert got.shape == (3, 5, 6)
    for b in range(3):
        for t in range(5):
            at = int(np.floor(track[b, t]))
            want = [
                int(phonemes[b, j]) if 0 <= j < 7 else v2.PHONE_PAD for j in range(at - 2, at + 3)
            ]
            assert got[b, t, :5].tolist() == want
            assert got[b, t, 5] == pytest.approx(float(track[b, t]) - at)
    with pytest.raises(ValueError, match="PHONE_PAD"):
        v2.phone_context(phonemes + v2.PHONE_PAD, track, 1)
