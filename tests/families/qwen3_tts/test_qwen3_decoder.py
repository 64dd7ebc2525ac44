"""Qwen3-TTS 12 Hz speech decoder (codecspec.families.qwen3_tts.decoder) against the official
implementation's float32 output, recorded by scripts/qwen3_decoder_fixtures.py on a tiny random
tokenizer built with the official qwen-tts 0.1.1 classes. No torch here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from paths import DATA

from codecspec.families.qwen3_tts import decoder as decoder_mod
from codecspec.families.qwen3_tts.decoder import SpeechDecoder
from codecspec.graphs.safetensors_io import SafetensorsFile, write_safetensors

DATA = DATA / "qwen3_tiny_tokenizer"
FOLDER = DATA / "speech_tokenizer"
TOL = 1e-4


@pytest.fixture(scope="module")
def fx():
    with np.load(DATA / "decoder_fixtures.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def dec(tmp_path_factory):
    return SpeechDecoder.load(FOLDER, cache_dir=tmp_path_factory.mktemp("cache"))


def _chunked(dec: SpeechDecoder, fx) -> SpeechDecoder:
    size, ctx = (int(v) for v in fx["chunked_params"])
    return SpeechDecoder(dec.session, dec.config, dec.graph_path, size, ctx)


def _blocks(codes: np.ndarray, sizes) -> list[np.ndarray]:
    out, i, k = [], 0, 0
    while i < len(codes):
        n = sizes[k % len(sizes)]
        out.append(codes[i : i + n])
        i, k = i + n, k + 1
    return out


def test_rates(dec):
    assert dec.sample_rate == 24000
    assert dec.samples_per_frame == 1920
    assert dec.num_quantizers == 16 and dec.codebook_size == 2048


@pytest.mark.parametrize("n", [1, 5, 30])
def test_decode_matches_official(dec, fx, n):
    wav = dec.decode(fx[f"codes_{n}"])
    assert wav.dtype == np.float32 and wav.shape == (n * 1920,)
    assert np.max(np.abs(wav - fx[f"wav_{n}"])) <= TOL


def test_decode_past_the_official_300_frame_segment(dec, fx):
    wav = dec.decode(fx["codes_long"])
    assert wav.shape == (302 * 1920,)
    head = fx["wav_long_head"]
    start = int(fx["wav_long_tail_start"])
    assert np.max(np.abs(wav[: len(head)] - head)) <= TOL
    assert np.max(np.abs(wav[start:] - fx["wav_long_tail"])) <= TOL


def test_segments_with_short_context_match_official_chunked_decode(dec, fx):
    d = _chunked(dec, fx)
    assert np.max(np.abs(d.decode(fx["codes_chunked"]) - fx["wav_chunked"])) <= TOL


def test_without_segment_resets_the_fixture_fails(dec, fx):
    """The chunked fixture can tell a decoder that ignores the official segmenting."""
    size, _ = (int(v) for v in fx["chunked_params"])
    d = SpeechDecoder(dec.session, dec.config, dec.graph_path, 10**6, 0)
    assert np.max(np.abs(d.decode(fx["codes_chunked"]) - fx["wav_chunked"])) > 1e-2
    # ... and one that keeps no context at the reset
    d = SpeechDecoder(dec.session, dec.config, dec.graph_path, size, 0)
    assert np.max(np.abs(d.decode(fx["codes_chunked"]) - fx["wav_chunked"])) > 1e-2


@pytest.mark.parametrize("chunk_frames", [1, 2, 7, 50])
@pytest.mark.parametrize("sizes", [(1,), (3, 0, 5), (23,)])
def test_stream_equals_decode_and_official(dec, fx, chunk_frames, sizes):
    d = _chunked(dec, fx)
    codes = fx["codes_chunked"]
    chunks = list(d.stream(iter(_blocks(codes, sizes)), chunk_frames=chunk_frames))
    assert all(len(c) == chunk_frames * 1920 for c in chunks[:-1])
    streamed = np.concatenate(chunks)
    assert np.max(np.abs(streamed - d.decode(codes))) <= TOL
    assert np.max(np.abs(streamed - fx["wav_chunked"])) <= TOL


def test_stream_long_default_segments(dec, fx):
    codes = fx["codes_long"]
    streamed = np.concatenate(list(dec.stream(_blocks(codes, (7, 1, 13)), chunk_frames=11)))
    start = int(fx["wav_long_tail_start"])
    assert np.max(np.abs(streamed - dec.decode(codes))) <= TOL
    assert np.max(np.abs(streamed[start:] - fx["wav_long_tail"])) <= TOL


def test_empty_input(dec):
    assert dec.decode(np.zeros((0, 16), dtype=np.int64)).shape == (0,)
    assert list(dec.stream([np.zeros((0, 16), dtype=np.int64)])) == []


@pytest.mark.parametrize(
    "codes",
    [
        np.full((3, 16), 2048),
        np.full((3, 16), -1),
        np.zeros((3, 15), dtype=np.int64),
        np.zeros(16, dtype=np.int64),
        np.zeros((2, 3, 16), dtype=np.int64),
        np.zeros((3, 16), dtype=np.float32),
    ],
)
def test_bad_codes(dec, codes):
    with pytest.raises(ValueError, match="codes"):
        dec.decode(codes)
    with pytest.raises(ValueError, match="codes"):
        list(dec.stream([np.zeros((2, 16), dtype=np.int64), codes]))


def test_bad_chunk_frames(dec):
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="chunk_frames"):
            dec.stream([np.zeros((2, 16), dtype=np.int64)], chunk_frames=bad)


# ---------------------------------------------------------------------- folder and cache
def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "speech_tokenizer"
    shutil.copytree(FOLDER, dst)
    return dst


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_25hz_tokenizer_is_refused(tmp_path):
    folder = _copy(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "qwen3_tts_tokenizer_25hz"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"speech_tokenizer_dir: .*25 Hz"):
        SpeechDecoder.load(folder, cache_dir=tmp_path / "cache")
    assert _entries(tmp_path / "cache") == []


@pytest.mark.parametrize("what", ["no folder", "no config", "bad json", "no decoder config"])
def test_not_a_tokenizer_folder(tmp_path, what):
    folder = _copy(tmp_path)
    if what == "no folder":
        folder = tmp_path / "missing"
    elif what == "no config":
        (folder / "config.json").unlink()
    elif what == "bad json":
        (folder / "config.json").write_text("{")
    else:
        cfg = json.loads((folder / "config.json").read_text())
        del cfg["decoder_config"]
        (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="speech_tokenizer_dir"):
        SpeechDecoder.load(folder, cache_dir=tmp_path / "cache")


def test_truncated_safetensors_leaves_no_cache_entry(tmp_path):
    folder = _copy(tmp_path)
    st = folder / "model.safetensors"
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"speech_tokenizer_dir: .*model\.safetensors"):
        SpeechDecoder.load(folder, cache_dir=tmp_path / "cache")
    assert _entries(tmp_path / "cache") == []


def test_failed_build_leaves_no_cache_entry(tmp_path):
    """A tensor of the wrong shape is found while building: nothing half-built remains."""
    folder = _copy(tmp_path)
    src = SafetensorsFile(folder / "model.safetensors")
    tensors = {k: src.get(k) for k in src.keys()}
    src.close()
    name = "decoder.decoder.6.conv.weight"
    tensors[name] = np.zeros((1, 2, 5), dtype=np.float32)
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(ValueError, match=r"speech_tokenizer_dir: .*decoder\.decoder\.6"):
        SpeechDecoder.load(folder, cache_dir=tmp_path / "cache")
    assert _entries(tmp_path / "cache") == []


def test_missing_tensor(tmp_path):
    folder = _copy(tmp_path)
    src = SafetensorsFile(folder / "model.safetensors")
    tensors = {k: src.get(k) for k in src.keys() if not k.startswith("decoder.pre_conv")}
    src.close()
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(ValueError, match=r"speech_tokenizer_dir: .*missing.*pre_conv"):
        SpeechDecoder.load(folder, cache_dir=tmp_path / "cache")


def test_cache_is_reused_and_keyed_by_content(tmp_path, monkeypatch, fx):
    folder = _copy(tmp_path)
    cache = tmp_path / "cache"
    first = SpeechDecoder.load(folder, cache_dir=cache)
    assert len(_entries(cache)) == 1

    def no_build(*_a, **_k):
        raise AssertionError("the cached graph should have been reused")

    monkeypatch.setattr(decoder_mod, "build_speech_decoder_graph", no_build)
    again = SpeechDecoder.load(folder, cache_dir=cache)
    assert again.graph_path == first.graph_path
    assert np.array_equal(again.decode(fx["codes_5"]), first.decode(fx["codes_5"]))
    monkeypatch.undo()

    # Other weights, other entry.
    src = SafetensorsFile(folder / "model.safetensors")
    tensors = {k: src.get(k) for k in src.keys()}
    src.close()
    tensors["decoder.pre_conv.conv.bias"] = tensors["decoder.pre_conv.conv.bias"] + 1.0
    write_safetensors(folder / "model.safetensors", tensors)
    changed = SpeechDecoder.load(folder, cache_dir=cache)
    assert changed.graph_path != first.graph_path
    assert len(_entries(cache)) == 2
    assert np.max(np.abs(changed.decode(fx["codes_5"]) - fx["wav_5"])) > 1e-3


def test_run_path_needs_no_torch(tmp_path):
    """Loading and decoding work with torch (and transformers) made unimportable."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['transformers'] = None\n"
        "import numpy as np\n"
        "from codecspec.families.qwen3_tts.decoder import SpeechDecoder\n"
        f"d = SpeechDecoder.load({str(FOLDER)!r}, cache_dir={str(tmp_path)!r})\n"
        "assert d.decode(np.zeros((2, 16), dtype=np.int64)).shape == (3840,)\n"
        "assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


@pytest.mark.parametrize("first,steady", [(1, 4), (1, 1), (2, 7), (3, 3)])
def test_stream_first_chunk_then_doubling(dec, fx, first, steady):
    """A short first chunk, doubling up to the steady size: the same audio as decode()."""
    d = _chunked(dec, fx)
    codes = fx["codes_chunked"]
    chunks = list(d.stream(iter(_blocks(codes, (1,))), steady, first_chunk_frames=first))
    sizes = [len(c) // 1920 for c in chunks]
    want, n = [], first
    while sum(want) < len(codes):
        want.append(min(n, len(codes) - sum(want)))
        n = min(2 * n, steady)
    assert sizes == want
    assert np.max(np.abs(np.concatenate(chunks) - d.decode(codes))) <= TOL


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_stream_refuses_a_bad_first_chunk(dec, bad):
    with pytest.raises(ValueError, match="first_chunk_frames"):
        list(dec.stream([np.zeros((2, 16), dtype=np.int64)], 4, first_chunk_frames=bad))


def test_fused_snake_gives_the_standard_graphs_audio(tmp_path, fx):
    """The CPU default runs SnakeBeta as codecspec's own operator (runtime.custom_ops): the
    same audio as the five-operator graph to float32 rounding, both within the official
    fixture's bound; the fused graph is written once beside the cached one."""
    cache = tmp_path / "cache"
    fused = SpeechDecoder.load(FOLDER, cache_dir=cache, fused=True)
    plain = SpeechDecoder.load(FOLDER, cache_dir=cache, fused=False)
    default = SpeechDecoder.load(FOLDER, cache_dir=cache, provider="cpu")
    assert fused.graph_path.name == "decoder.fused.onnx" == default.graph_path.name
    assert plain.graph_path.name == "decoder.onnx"
    assert fused.graph_path.parent == plain.graph_path.parent
    for n in (1, 30):
        a, b = fused.decode(fx[f"codes_{n}"]), plain.decode(fx[f"codes_{n}"])
        assert np.max(np.abs(a - b)) <= 1e-5
        assert np.max(np.abs(a - fx[f"wav_{n}"])) <= TOL


@pytest.mark.parametrize("bad", ["yes", 1])
def test_fused_must_be_a_bool_or_none(bad):
    with pytest.raises(ValueError, match="fused"):
        SpeechDecoder.load(FOLDER, fused=bad)


def test_a_read_only_cache_falls_back_to_the_standard_graph(tmp_path, monkeypatch, fx):
    """Writing decoder.fused.onnx can fail (a shared, read-only cache): the decoder then runs
    the standard graph rather than failing to load."""
    cache = tmp_path / "cache"
    SpeechDecoder.load(FOLDER, cache_dir=cache, fused=False)  # the entry exists

    def refuse(*_a, **_k):
        raise PermissionError("read-only cache")

    monkeypatch.setattr("onnx.save", refuse)
    dec = SpeechDecoder.load(FOLDER, cache_dir=cache)
    assert dec.graph_path.name == "decoder.onnx"
    assert not list(dec.graph_path.parent.glob("decoder.fused.onnx*"))
    assert np.max(np.abs(dec.decode(fx["codes_5"]) - fx["wav_5"])) <= TOL
