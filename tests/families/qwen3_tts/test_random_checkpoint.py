"""`codecspec random-checkpoint`: a random-weight Qwen3-TTS folder the end-to-end path loads like
a download (tiny shape here; the real shapes are the same code with other numbers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from codecspec.cli import main  # noqa: E402
from codecspec.families.qwen3_tts.random_checkpoint import (  # noqa: E402
    SHAPES,
    model_tensor_shapes,
    write_random_checkpoint,
)
from codecspec.graphs.safetensors_io import (  # noqa: E402
    SafetensorsFile,
    write_safetensors,
    write_safetensors_stream,
)

TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("rand") / "tiny"
    info = write_random_checkpoint("tiny", out, seed=3)
    return out, info


def test_folder_has_the_published_layout(tiny):
    out, info = tiny
    for f in (
        "config.json",
        "generation_config.json",
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "model.safetensors.index.json",
        "speech_tokenizer/config.json",
        "speech_tokenizer/preprocessor_config.json",
        "speech_tokenizer/model.safetensors",
    ):
        assert (out / f).is_file(), f
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    want = model_tensor_shapes(SHAPES["tiny"]())
    assert set(index["weight_map"]) == set(want)
    got = {}
    for s in shards:
        st = SafetensorsFile(out / s)
        got.update({n: st.shape(n) for n in st.keys()})
        assert {st.dtype(n) for n in st.keys()} == {"BF16"}
    assert got == {n: tuple(v) for n, v in want.items()}
    assert index["metadata"]["total_size"] == 2 * sum(int(np.prod(v)) for v in want.values())
    assert info["parameters"] == sum(int(np.prod(v)) for v in want.values())


def test_real_shapes_match_the_published_dimensions():
    s06, s17 = SHAPES["qwen3-0.6b"](), SHAPES["qwen3-1.7b"]()
    t06, t17 = model_tensor_shapes(s06), model_tensor_shapes(s17)
    assert t06["talker.model.text_embedding.weight"] == (151936, 2048)
    assert t06["talker.model.layers.27.self_attn.q_proj.weight"] == (2048, 1024)
    assert t06["talker.model.layers.27.self_attn.k_proj.weight"] == (1024, 1024)
    assert t06["talker.model.layers.0.mlp.gate_proj.weight"] == (3072, 1024)
    assert t06["talker.codec_head.weight"] == (3072, 1024)
    assert t06["talker.code_predictor.lm_head.14.weight"] == (2048, 1024)
    assert "talker.code_predictor.small_to_mtp_projection.weight" not in t06  # Identity
    assert t17["talker.model.layers.0.mlp.gate_proj.weight"] == (6144, 2048)
    assert t17["talker.code_predictor.small_to_mtp_projection.weight"] == (1024, 2048)
    assert t17["talker.code_predictor.model.codec_embedding.0.weight"] == (2048, 2048)
    # 0.6B: ~0.9B parameters with the 311M text table (the published file is 1.83 GB bf16)
    n06 = sum(int(np.prod(v)) for v in t06.values())
    assert 0.85e9 < n06 < 0.95e9, n06
    assert (s06.shards, s17.shards) == (1, 2)
    from codecspec.families.qwen3_tts.checkpoint import talker_spec
    from codecspec.families.qwen3_tts.random_checkpoint import _root_config

    for s, hidden in ((s06, 1024), (s17, 2048)):  # the config the runtime reads
        spec = talker_spec(_root_config(s, "custom_voice", None))
        assert (spec.hidden_size, spec.num_layers, spec.head_dim) == (hidden, 28, 128)
        assert (spec.vocab_size, spec.text_vocab_size, spec.text_hidden_size) == (
            3072,
            151936,
            2048,
        )
        assert spec.codec["eos"] == 2150 and spec.codec["pad"] == 2148
        assert spec.speakers["vivian"] == 3065 and spec.languages["english"] == 2050
        assert spec.text["im_start"] == 151644 and spec.text["tts_eos"] == 151673
        assert spec.speaker_dialect["eric"] == "sichuan_dialect"


def test_tokenizer_has_the_declared_special_ids(tiny):
    out, _ = tiny
    from codecspec.families.qwen3_tts.text import load_text_tokenizer

    cfg = json.loads((out / "config.json").read_text())
    tok = load_text_tokenizer(out)
    assert tok.get_vocab_size() == 2000 + 31
    assert tok.token_to_id("<|im_start|>") == cfg["im_start_token_id"] == 2001
    assert tok.token_to_id("<|tts_pad|>") == cfg["tts_pad_token_id"]
    assert tok.token_to_id("<|tts_text_eod|>") == cfg["tts_eos_token_id"]
    assert cfg["talker_config"]["text_vocab_size"] >= tok.get_vocab_size()
    ids = tok.encode(f"<|im_start|>assistant\n{TEXT}<|im_end|>").ids
    assert ids[0] == cfg["im_start_token_id"] and ids[-1] == cfg["im_end_token_id"]
    assert tok.decode(ids, skip_special_tokens=True) == f"assistant\n{TEXT}"


def test_loads_and_synthesizes_like_a_download(tiny, tmp_path):
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    out, _ = tiny
    tts = Qwen3TTS.load(out, cache_dir=tmp_path / "cache", provider="cpu")
    assert "aiden" in tts.speakers and "english" in tts.languages
    kw = dict(speaker="aiden", language="english", temperature=0, max_frames=5)
    ar = tts.generate_codes(TEXT, mode="ar", **kw)
    spec = tts.generate_codes(TEXT, mode="spec", **kw)
    assert ar.codes.shape == (5, 16)  # random weights never say eos
    assert np.array_equal(ar.codes, spec.codes)  # greedy: the speculative loop is exact
    assert ar.codes.max() < 64  # the tiny codebook
    wav = tts.speech_decoder().decode(ar.codes)
    assert wav.shape == (5 * 1920,)
    assert np.all(np.isfinite(wav)) and float(np.std(wav)) > 1e-4


def test_same_seed_same_weights_other_seed_other(tmp_path):
    a = write_random_checkpoint("tiny", tmp_path / "a", seed=1)
    b = write_random_checkpoint("tiny", tmp_path / "b", seed=1)
    c = write_random_checkpoint("tiny", tmp_path / "c", seed=2)
    assert a["files"] == b["files"] == c["files"]
    name = "talker.model.layers.1.mlp.up_proj.weight"

    def tensor(folder):
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        return SafetensorsFile(folder / index["weight_map"][name]).get(name)

    ta, tb, tc = (tensor(tmp_path / k) for k in "abc")
    assert np.array_equal(ta, tb) and not np.array_equal(ta, tc)
    for f in a["files"]:  # the whole folder, tokenizer included, is a function of the seed
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    # weights N(0, 1/fan_in): the 1/sqrt(48) scale, not unit variance
    assert 0.1 < float(ta.std()) < 0.2


def test_stream_writer_equals_the_whole_writer(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((7, 5)), "b": rng.standard_normal((3,))}
    for dtype in ("f32", "bf16"):
        write_safetensors(tmp_path / "whole.st", tensors, dtype, {"format": "pt"})

        def blocks(name, shape):  # rows one at a time
            yield from (np.atleast_1d(r) for r in tensors[name])

        shapes = {k: v.shape for k, v in tensors.items()}
        n = write_safetensors_stream(tmp_path / "s.st", shapes, blocks, dtype, {"format": "pt"})
        assert (tmp_path / "s.st").read_bytes() == (tmp_path / "whole.st").read_bytes()
        assert n == sum(v.size for v in tensors.values()) * (4 if dtype == "f32" else 2)


def test_stream_writer_rejects_a_wrong_block_count(tmp_path):
    def short(name, shape):
        yield np.zeros(shape[0] - 1)

    with pytest.raises(ValueError, match="tensor 'a'"):
        write_safetensors_stream(tmp_path / "x.st", {"a": (4,)}, short)


def test_bad_arguments_name_themselves(tmp_path):
    with pytest.raises(ValueError, match="^shape: 'qwen3-7b'"):
        write_random_checkpoint("qwen3-7b", tmp_path / "x")
    with pytest.raises(ValueError, match="^model_type: 'base'"):
        write_random_checkpoint("tiny", tmp_path / "x", model_type="base")
    with pytest.raises(ValueError, match="^seed:"):
        write_random_checkpoint("tiny", tmp_path / "x", seed=-1)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="^out: .*not empty"):
        write_random_checkpoint("tiny", busy)
    assert (busy / "keep.txt").read_text() == "mine"  # nothing touched
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match="^out: .*not a folder"):
        write_random_checkpoint("tiny", afile)


def test_cli(tmp_path, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert main(["random-checkpoint", "tiny", str(busy)]) == 2
    err = capsys.readouterr().err
    assert "out:" in err and "--force" in err
    with pytest.raises(SystemExit) as e:  # argparse: unknown shape
        main(["random-checkpoint", "qwen3-7b", str(tmp_path / "y")])
    assert e.value.code == 2
    assert "invalid choice: 'qwen3-7b'" in capsys.readouterr().err
    assert main(["random-checkpoint", "tiny", str(busy), "--force"]) == 2
    assert "not a Qwen3-TTS folder" in capsys.readouterr().err
    assert (busy / "keep.txt").read_text() == "mine"  # --force never wipes other folders
    again = tmp_path / "again"
    assert main(["random-checkpoint", "tiny", str(again), "--seed", "1"]) == 0
    (again / "stale.txt").write_text("old")
    assert main(["random-checkpoint", "tiny", str(again), "--force", "--json"]) == 0
    info = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert info["shape"] == "tiny" and info["seed"] == 0
    assert not (again / "stale.txt").exists() and (again / "config.json").is_file()
    vd = tmp_path / "vd"
    assert main(["random-checkpoint", "tiny", str(vd), "--model-type", "voice_design"]) == 0
    cfg = json.loads((vd / "config.json").read_text())
    assert cfg["tts_model_type"] == "voice_design" and cfg["talker_config"]["spk_id"] == {}


def test_synth_and_bench_commands_take_the_folder(tiny, tmp_path, monkeypatch, capsys):
    out, _ = tiny
    monkeypatch.setenv("CODECSPEC_CACHE_DIR", str(tmp_path / "cache"))
    wav = tmp_path / "x.wav"
    argv = ["synth", "Hello there.", "--model", str(out), "--speaker", "aiden"]
    assert main(argv + ["--max-frames", "3", "--temperature", "0", "-o", str(wav)]) == 0
    import wave

    with wave.open(str(wav)) as w:
        assert (w.getframerate(), w.getnframes()) == (24000, 3 * 1920)
    capsys.readouterr()
    argv = ["bench", "--model", str(out), "--frames", "6", "--temperature", "0"]
    assert main(argv + ["--weights", "fp32", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["frames"] == 6 and rec["weights"] == "fp32"
    assert rec["greedy_spec_equals_ar"] is True


def test_merges_starting_with_a_hash_are_merges(tmp_path):
    """merges.txt: only the first line's #version header is a comment (transformers' rule)."""
    from codecspec.families.qwen3_tts.text import load_text_tokenizer

    vocab = {"#": 0, "a": 1, "##": 2, "aa": 3}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n# #\na a\n")
    tok = load_text_tokenizer(tmp_path)
    assert tok.encode("##").ids == [2]
    assert tok.encode("aa").ids == [3]


def test_a_failed_write_leaves_nothing_and_keeps_the_old_folder(tmp_path, monkeypatch):
    import codecspec.families.qwen3_tts.random_checkpoint as rc

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(rc, "_write_speech_tokenizer", boom)
    with pytest.raises(OSError, match="disk full"):
        write_random_checkpoint("tiny", tmp_path / "new")
    assert list(tmp_path.iterdir()) == []  # no half folder, no staging leftovers
    monkeypatch.undo()
    old = tmp_path / "old"
    write_random_checkpoint("tiny", old, seed=5)
    before = (old / "config.json").read_bytes()
    monkeypatch.setattr(rc, "_write_speech_tokenizer", boom)
    with pytest.raises(OSError):
        write_random_checkpoint("tiny", old, force=True)
    assert (old / "config.json").read_bytes() == before  # replaced only once complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]
