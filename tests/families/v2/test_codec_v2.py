"""Codec v2 (issue 12): grid levels over PCA. Round trip, every level lowers the error,
neighbours / groups / stability on a small fixed clip, persistence, bad input. Synthetic
log-mel-like frames and one synthetic clip; numpy only, seconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

import codecspec as cs
from codecspec.codec import CodecConfig, frame_features
from codecspec.families.v2.codec import CodecV2, V2Config, mean_group_size, stability

SR = 16000


def _frames(n=5000, seed=0, dims=40):
    """Frames with a decaying spectrum (a few strong directions), like stacked log-mel."""
    basis = np.random.default_rng(0).normal(size=(dims, 640))
    z = np.random.default_rng(seed + 1).normal(size=(n, dims)) * (3.0 * 0.92 ** np.arange(dims))
    return (z @ basis / 8.0 - 4.0).astype(np.float32)


SMALL = V2Config.blocks(grid=(4, 4), n_levels=6, refine=2, refine_grid=(4, 4))


@pytest.fixture(scope="module")
def codec():
    return CodecV2.fit(_frames(), SMALL, iters=10)


def _clip(f0=140.0, seconds=0.8):
    """A vowel-like harmonic tone with a slow amplitude envelope (fixed, deterministic)."""
    t = np.arange(int(seconds * SR)) / SR
    env = 0.5 + 0.4 * np.sin(2 * np.pi * 1.5 * t)
    x = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 20))
    # a fixed noise floor: without it the empty high bands' log-mel is all log_offset, and any
    # perturbation at all is a huge relative change there
    floor = np.random.default_rng(1).normal(0.0, 3e-3, t.size)
    return (0.1 * env * x + floor).astype(np.float32)


@pytest.fixture(scope="module")
def clip_codec():
    """A small codec fitted on frames of clips like the test clip (varied pitch)."""
    cfg = CodecConfig()
    feats = np.concatenate(
        [frame_features(_clip(f0, 1.2) * g, cfg) for f0 in range(100, 260, 6) for g in (0.5, 1.0)]
    )
    return CodecV2.fit(feats, V2Config.blocks(grid=(4, 4), n_levels=4), iters=10)


def test_config_blocks_and_sizes():
    c = V2Config.blocks()
    assert c.n_levels == 16 and c.pca_dim == 64 and set(c.level_sizes) == {1024}
    assert math.isclose(c.bits_per_frame, 160.0)
    r = V2Config.blocks(refine=4, refine_grid=(4, 4, 4, 4))
    assert r.pca_dim == 48
    # interleaved (default): each refinement follows the level it refines, coarse to fine
    assert r.spec[0][0] == r.spec[1][0] == (0, 1, 2, 3) and r.spec[1][1] == (4, 4, 4, 4)
    assert [lv[0][0] for lv in r.spec[:9]] == [0, 0, 4, 4, 8, 8, 12, 12, 16]
    tail = V2Config.blocks(refine=4, refine_grid=(4, 4, 4, 4), interleave=False)
    assert tail.spec[12] == ((0, 1, 2, 3), (4, 4, 4, 4)) and set(tail.spec) == set(r.spec)
    assert SMALL.level_sizes == (16,) * 6


def test_round_trip_and_persistence(codec, tmp_path):
    f = _frames(300, seed=5)
    codes = codec.encode_features(f)
    assert codes.shape == (300, 6) and codes.dtype == np.int32
    assert codes.min() >= 0 and np.all(codes < np.array(codec.level_sizes))
    # decoding then re-encoding gives the same codes on the levels no refinement touches...
    z = codec.latent(codes)
    plain = CodecV2.fit(_frames(), V2Config.blocks(grid=(4, 4), n_levels=4), iters=10)
    pc = plain.encode_features(f)
    assert np.array_equal(plain.encode_latent(plain.latent(pc)), pc)
    # ...while a refinement may move a value across its coarse cell's edge: not a fixed point,
    # but re-encoding never makes the latent worse than one more pass of the quantiser
    again = codec.latent(codec.encode_latent(z))
    assert np.mean((again - z) ** 2) <= np.mean((z - codec.pca.project(f)) ** 2)
    codec.save(tmp_path / "v2.npz")
    back = CodecV2.load(tmp_path / "v2.npz")
    assert np.array_equal(back.encode_features(f), codes)
    assert np.allclose(back.decode_features(codes), codec.decode_features(codes), atol=1e-2)
    wav = back.decode(codes[:5], n_iter=2)
    assert wav.shape == (5 * 1280,) and wav.dtype == np.float32 and np.all(np.isfinite(wav))
    assert back.decode(codes[:0]).shape == (0,)


def test_every_level_lowers_the_error(codec):
    f = _frames(2000, seed=7)  # held out: another seed
    codes = codec.encode_features(f)
    err = [float(np.mean((codec.decode_features(codes[:, :k]) - f) ** 2)) for k in range(1, 7)]
    assert all(a > b for a, b in zip(err, err[1:])), err


@pytest.mark.parametrize("bins", ["uniform", "quantile", "lloyd"])
def test_bin_placements_are_ordered_and_decrease(bins):
    c = CodecV2.fit(_frames(3000), V2Config.blocks(grid=(8, 4), n_levels=3, bins=bins), iters=5)
    for s in range(c.values.shape[0]):
        n = (8, 4)[s % 2]
        assert np.all(np.diff(c.values[s, :n]) > 0)
    f = _frames(800, seed=3)
    codes = c.encode_features(f)
    err = [float(np.mean((c.decode_features(codes[:, :k]) - f) ** 2)) for k in (1, 2, 3)]
    assert err[0] > err[1] > err[2]


def test_code_vectors_neighbours_and_digits(codec):
    v = codec.code_vectors(0)
    assert v.shape == (16, codec.cfg.pca_dim)
    assert np.all(v[:, 2:] == 0)  # level 0 covers components 0 and 1 only
    nb = codec.neighbours(0)
    # a 4 x 4 grid: corners have 3 neighbours, edges 5, the inside 8
    deg = (nb >= 0).sum(1)
    assert nb.shape == (16, 8) and sorted(np.bincount(deg)[[3, 5, 8]]) == [4, 4, 8]
    d = codec.digits(0, np.arange(16))
    for code in range(16):
        for n in nb[code][nb[code] >= 0]:
            assert np.abs(d[n] - d[code]).max() == 1
    assert codec.within_one_step(0, np.array([0, 0]), np.array([5, 10])).tolist() == [True, False]


def test_groups_are_grid_neighbourhoods(codec):
    for level in range(codec.n_levels):
        e = codec.embeddings(level)
        assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
        sizes = [mean_group_size(codec.groups(level, t)) for t in (0.9, 0.8, 0.7, 0.6)]
        assert 1.0 <= sizes[0] <= sizes[1] <= sizes[2] <= sizes[3] <= 16
        assert sizes[-1] > 1.0  # neighbours exist at every level
    # every member of a code's θ = 0.9 group is close on the grid: acoustic structure
    g = codec.groups(0, 0.9)
    d = codec.digits(0, np.arange(16))
    for k in range(16):
        m = g.members(k)
        assert np.abs(d[m] - d[k]).max() <= 2
    assert isinstance(g, cs.AcousticGroups)


def test_stability_on_a_small_fixed_clip(clip_codec):
    x = _clip()
    a = clip_codec.encode(x)
    assert stability(clip_codec, a, clip_codec.encode(x))["identical"] == [1.0] * 4
    # a tiny change of the signal: codes stay or move to a grid neighbour
    y = x + np.random.default_rng(0).normal(0, 1e-3, x.size).astype(np.float32)
    s = stability(clip_codec, a, clip_codec.encode(y))
    assert min(s["within_one"]) >= 0.9 and min(s["identical"]) >= 0.5
    # a quarter-tone pitch change flips more codes, but they move to grid neighbours
    s2 = stability(clip_codec, a, clip_codec.encode(_clip(140.0 * 2 ** (1 / 24))))
    assert min(s2["within_one"]) >= 0.8 and min(s2["identical"]) < 1.0
    with pytest.raises(ValueError, match="codes_b"):
        stability(clip_codec, a, a[:-1])


def test_bad_inputs_name_the_argument(codec, tmp_path):
    with pytest.raises(ValueError, match="spec"):
        V2Config(spec=(((0, 1), (4,)),))
    with pytest.raises(ValueError, match="spec"):
        V2Config(spec=(((0,), (1,)),))
    with pytest.raises(ValueError, match="spec"):
        V2Config(spec=(((0, 1), (128, 64)),))  # 8192 codes > 4096
    with pytest.raises(ValueError, match="spec"):
        V2Config(spec=(((1,), (4,)),))  # component 0 missing
    with pytest.raises(ValueError, match="bins"):
        V2Config.blocks(bins="kmeans")
    with pytest.raises(ValueError, match="refine"):
        V2Config.blocks(grid=(4,), n_levels=3, refine=2, refine_grid=(4, 4))
    with pytest.raises(ValueError, match="n_levels"):
        V2Config.blocks(n_levels=0)
    with pytest.raises(ValueError, match="features"):
        CodecV2.fit(np.zeros((10, 639), np.float32), SMALL)
    with pytest.raises(ValueError, match="features"):
        CodecV2.fit(_frames(8), SMALL)
    with pytest.raises(ValueError, match="cfg"):
        CodecV2.fit(_frames(100), "8,8,4,4")
    with pytest.raises(ValueError, match="codes"):
        codec.decode(np.zeros((3, 7), np.int32))
    with pytest.raises(ValueError, match="codes"):
        codec.decode(np.full((3, 2), 16, np.int32))
    with pytest.raises(ValueError, match="codes"):
        codec.decode(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="level"):
        codec.neighbours(6)
    with pytest.raises(ValueError, match="z"):
        codec.encode_latent(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="path"):
        CodecV2.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", format=np.array("codecspec.codec/1"))
    with pytest.raises(ValueError, match="path"):
        CodecV2.load(tmp_path / "other.npz")
