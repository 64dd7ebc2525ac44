"""cs.Projection, the vocoders' matrix products in the Rust core (not numpy's BLAS, whose
spinning workers and process-global thread count the decode path must not depend on): its
documented arithmetic to the bit, numpy's products within rounding, the same bits from any
thread, and each shipped codec's decode against the numpy products it replaced."""

from __future__ import annotations

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from paths import REPO

import codecspec as cs
from codecspec.codec.audio import read_wav
from codecspec.codec.codec import Codec
from codecspec.codec.features import griffin_lim, log_spectral_distance
from codecspec.codec.rvq import rvq_decode
from codecspec.families.fsq.codec import FSQCodec
from codecspec.families.v2.codec import CodecV2

ROOT = REPO
MODELS = ROOT / "python" / "codecspec" / "models"
CODECS = {
    "v1": lambda: Codec.load(MODELS / "v3" / "codec.npz"),  # the v3 model's codec
    "fsq": lambda: FSQCodec.load(MODELS / "fsq" / "fsqcodec.npz"),
    "v2": lambda: CodecV2.load(ROOT / "models" / "v2" / "codec_v2.npz"),
}


def in_documented_order(x, w, b):
    """(sum over k in order of x[:, k] * w[k], each product and sum rounded) + b: numpy's
    elementwise float ops, which neither fuse nor reorder, give the floats the map promises."""
    acc = np.zeros((x.shape[0], w.shape[1]), x.dtype)
    for k in range(x.shape[1]):
        acc = acc + x[:, k : k + 1] * w[k]
    return acc if b is None else acc + b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,k,m", [(1, 3, 5), (9, 80, 513), (12, 128, 640), (5, 17, 23)])
def test_the_documented_arithmetic_to_the_bit(dtype, n, k, m):
    rng = np.random.default_rng(n * k + m)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((n, k), (k, m), (m,)))
    for bias in (None, b):
        p = cs.Projection(w, bias)
        y = p.apply(x)
        assert y.dtype == dtype and y.shape == (n, m) and p.dtype == np.dtype(dtype).name
        assert y.tobytes() == in_documented_order(x, w, bias).tobytes()
        # numpy's product (OpenBLAS: another order, fused multiply-adds) within rounding
        eps = np.finfo(dtype).eps
        bound = 2 * k * eps * (np.abs(x) @ np.abs(w) + (0 if bias is None else np.abs(bias)))
        want = x @ w + (0 if bias is None else bias)
        assert np.all(np.abs(y.astype(np.float64) - want) <= bound)


def test_same_bits_from_every_thread_and_call():
    rng = np.random.default_rng(0)
    p = cs.Projection(rng.standard_normal((80, 513)))
    x = np.exp(rng.standard_normal((96, 80)))
    want = p.apply(x).tobytes()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: p.apply(x).tobytes(), range(64)))
    assert all(g == want for g in got)


def test_checks_and_pickle():
    p = cs.Projection(np.ones((2, 3), np.float32), np.zeros(3, np.float32))
    assert (p.in_features, p.out_features, p.dtype) == (2, 3, "float32")
    q = pickle.loads(pickle.dumps(p))
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    assert q.apply(x).tobytes() == p.apply(x).tobytes() and q.dtype == "float32"
    assert p.apply(np.zeros((0, 2))).shape == (0, 3)
    for bad, arg in [
        (lambda: cs.Projection(np.ones(3)), "weights"),
        (lambda: cs.Projection(np.full((2, 2), np.nan)), "weights"),
        (lambda: cs.Projection(np.ones((2, 3)), np.ones(2)), "bias"),
        (lambda: p.apply(np.ones((4, 3))), "x"),
        (lambda: p.apply(np.ones(2)), "x"),
    ]:
        with pytest.raises(ValueError, match=arg):
            bad()


def numpy_decode(codec, codes, seed=0):
    """(features, magnitude, waveform) with the products as numpy computed them before."""
    pca = getattr(codec, "pca", codec)
    z = codec.latent(codes) if hasattr(codec, "latent") else rvq_decode(codes, codec._books)
    f = np.asarray(z, np.float32) @ pca._p.T + pca.mean
    c = pca.cfg
    mel = np.maximum(np.exp(f.astype(np.float64).reshape(-1, c.n_mels)) - c.log_offset, 0.0)
    mag = np.maximum(mel @ pca._fb_pinv.T, 0.0)
    n = len(codes) * c.frame_hop
    wav = griffin_lim(mag, c.n_fft, c.stft_hop, c.win_length, n, seed=seed)
    return f, mag, wav.astype(np.float32)


@pytest.fixture(scope="module")
def speech():
    return read_wav(MODELS / "fsq" / "sample.wav")


@pytest.mark.parametrize("name", sorted(CODECS))
def test_decode_of_real_codes_matches_the_numpy_products(name, speech):
    """Bounds: features max abs diff <= 1e-5 (|f| <= 9: a few float32 ulps, the size of
    OpenBLAS's own error), magnitudes of the same features to 1e-12 relative, waveforms max
    abs diff <= 5e-4 and log-spectral distance <= 0.01 dB. The waveform bound is loose
    because 32 Griffin-Lim iterations amplify last-bit feature differences ~100x: numpy's
    own decode moved by up to 9e-5 between OPENBLAS_NUM_THREADS=1 and 2 on these codes."""
    codec = CODECS[name]()
    pca = getattr(codec, "pca", codec)
    codes = codec.encode(*speech)
    f_np, mag_np, wav_np = numpy_decode(codec, codes)
    f = codec.decode_features(codes)
    assert f.dtype == np.float32 and np.abs(f - f_np).max() <= 1e-5
    mag = pca.features_to_magnitude(f_np)
    assert np.abs(mag - mag_np).max() <= 1e-12 * np.abs(mag_np).max()
    wav = codec.decode(codes)
    assert np.abs(wav - wav_np).max() <= 5e-4
    assert log_spectral_distance(wav_np.astype(np.float64), wav.astype(np.float64)) <= 0.01


def test_decode_reads_no_numpy_table_and_gives_the_same_bytes_from_threads():
    """Decoding uses the Rust maps only (the numpy tables removed, it still decodes to the
    same bytes), and threads decoding at once get the bytes of one decode alone."""
    codec = CODECS["v1"]()
    codes = np.random.default_rng(1).integers(0, codec.cfg.codebook_size, (12, 16))
    want = codec.decode(codes, n_iter=4).tobytes()
    codec._p = codec._fb_pinv = None  # a numpy product on the decode path would now fail
    barrier, got = threading.Barrier(4), []

    def one(_):
        barrier.wait()
        return codec.decode(codes, n_iter=4).tobytes()

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(one, range(4)))
    assert got == [want] * 4
