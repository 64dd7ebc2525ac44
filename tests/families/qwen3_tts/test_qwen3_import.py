"""Qwen3-TTS checkpoint import (`families.qwen3_tts.predictor_import`) and the safetensors
reader."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from codecspec.families.qwen3_tts.predictor_import import (  # noqa: E402
    config_from_qwen3_tts,
    load_qwen3_tts_checkpoint,
    write_synthetic_qwen3_checkpoint,
)
from codecspec.graphs import (  # noqa: E402
    DepthDecoderConfig,
    SafetensorsFile,
    build_depth_graph,
    cpu_variant_supported,
    embedding_row,
    example_feeds,
    forward_hidden,
    qwen3_tts_0_6b,
    reference_run,
    write_safetensors,
    zero_row,
)
from codecspec.runtime.session import open_session  # noqa: E402

SMALL = dict(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    num_codebooks=5,
    codebook_size=64,
    c0_vocab_size=80,
    max_positions=16,
)
CP = "talker.code_predictor."

# config.json of the released 0.6B model, reduced to the keys the importer reads (the nesting
# and key names are those of configuration_qwen3_tts.py)
QWEN_0_6B_CONFIG = {
    "model_type": "qwen3_tts",
    "talker_config": {
        "hidden_size": 1024,
        "vocab_size": 3072,
        "num_code_groups": 16,
        "rope_scaling": {
            "interleaved": True,
            "mrope_section": [24, 20, 20],
            "rope_type": "default",
        },
        "code_predictor_config": {
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 5,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_act": "silu",
            "max_position_embeddings": 65536,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000,
            "rope_scaling": None,
            "attention_bias": False,
            "vocab_size": 2048,
            "num_code_groups": 16,
        },
    },
}


def _variants():
    return ["plain", "cpu"] if cpu_variant_supported() else ["plain"]


def _run_graph(cfg, w, variant, feeds):
    model = build_depth_graph(cfg, w, variant=variant, heads="graph")
    s = open_session(model.SerializeToString(), provider="cpu")
    names = [i.name for i in s.get_inputs()]
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, {n: feeds[n] for n in names})))


# ---------------------------------------------------------------------- config mapping
def test_released_config_maps_to_preset():
    assert config_from_qwen3_tts(QWEN_0_6B_CONFIG) == qwen3_tts_0_6b()


def test_larger_talker_gets_input_projection():
    root = json.loads(json.dumps(QWEN_0_6B_CONFIG))
    root["talker_config"]["hidden_size"] = 2048  # 1.7B: talker 2048 -> predictor 1024
    cfg = config_from_qwen3_tts(root)
    assert cfg.input_hidden_size == 2048 and cfg.hidden_size == 1024


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("hidden_act", "gelu", "hidden_act"),
        ("attention_bias", True, "attention_bias"),
        ("rope_scaling", {"rope_type": "linear", "factor": 2.0}, "rope"),
        ("use_sliding_window", True, "sliding"),
    ],
)
def test_unsupported_config_is_rejected(key, value, match):
    root = json.loads(json.dumps(QWEN_0_6B_CONFIG))
    root["talker_config"]["code_predictor_config"][key] = value
    with pytest.raises(ValueError, match=match):
        config_from_qwen3_tts(root)


def test_missing_config_sections():
    with pytest.raises(ValueError, match="talker_config"):
        config_from_qwen3_tts({"model_type": "qwen3_tts"})
    with pytest.raises(ValueError, match="code_predictor_config"):
        config_from_qwen3_tts({"talker_config": {"hidden_size": 8}})


# ---------------------------------------------------------------------- synthetic checkpoints
@pytest.mark.parametrize("dtype", ["bf16", "f32", "f16"])
@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("talker_hidden", [None, 48], ids=["same_width", "projected"])
def test_synthetic_checkpoint_round_trip(tmp_path, dtype, shards, talker_hidden):
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=talker_hidden)
    stored = write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=5, dtype=dtype, shards=shards)
    files = sorted(os.listdir(tmp_path))
    if shards == 1:
        assert "model.safetensors" in files and "model.safetensors.index.json" not in files
    else:
        assert "model.safetensors.index.json" in files
        assert sum(f.endswith(".safetensors") for f in files) == shards

    got_cfg, got = load_qwen3_tts_checkpoint(tmp_path, max_positions=SMALL["max_positions"])
    assert got_cfg == cfg
    assert set(got) == set(stored)
    for name in stored:
        np.testing.assert_array_equal(got[name], stored[name], err_msg=name)

    feeds = example_feeds(got_cfg, past_len=2, parents=[-1, 0, 0, 1, 2], seed=1)
    feeds["draft_offsets"] = np.random.default_rng(0).standard_normal(
        (cfg.num_draft_offsets, cfg.hidden_size), dtype=np.float32
    )
    ref = reference_run(got_cfg, got, feeds)
    for variant in _variants():
        out = _run_graph(got_cfg, got, variant, feeds)
        for name, value in ref.items():
            np.testing.assert_allclose(out[name], value, atol=1e-4, rtol=1e-4, err_msg=name)


def test_checkpoint_uses_official_names(tmp_path):
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=48)
    write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=0, dtype="bf16")
    names = set(SafetensorsFile(tmp_path / "model.safetensors").keys())
    for name in [
        "talker.model.codec_embedding.weight",
        CP + "model.codec_embedding.0.weight",
        CP + f"model.codec_embedding.{cfg.num_codebooks - 2}.weight",
        CP + "lm_head.0.weight",
        CP + "small_to_mtp_projection.weight",
        CP + "small_to_mtp_projection.bias",
        CP + "model.layers.1.self_attn.q_norm.weight",
        CP + "model.layers.0.post_attention_layernorm.weight",
        CP + "model.layers.0.mlp.down_proj.weight",
        CP + "model.norm.weight",
        "talker.codec_head.weight",
    ]:
        assert name in names, name
    f = SafetensorsFile(tmp_path / "model.safetensors")
    assert f.dtype(CP + "lm_head.0.weight") == "BF16"
    assert f.shape("talker.model.codec_embedding.weight") == (cfg.c0_vocab_size, 48)


def test_first_two_positions_follow_qwen_prefill(tmp_path):
    """Position 0 = talker hidden (zero row + embedding), position 1 = emb(c0) -> head 0."""
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=48)
    write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=2, dtype="f32")
    cfg, w = load_qwen3_tts_checkpoint(tmp_path, max_positions=SMALL["max_positions"])
    rng = np.random.default_rng(0)
    talker_hidden = rng.standard_normal(48).astype(np.float32)
    c0 = 17
    feeds = {
        "input_ids": np.array([zero_row(cfg), embedding_row(cfg, 0, c0)], np.int64),
        "input_embeds": np.stack([talker_hidden, np.zeros(48, np.float32)]),
        "position_ids": np.array([0, 1], np.int64),
        "attention_bias": np.array([[0, -np.inf], [0, 0]], np.float32),
        "past_keys": np.zeros((cfg.num_layers, cfg.num_kv_heads, 0, cfg.head_dim), np.float32),
        "past_values": np.zeros((cfg.num_layers, cfg.num_kv_heads, 0, cfg.head_dim), np.float32),
        "head_ids": np.array([0, 0], np.int64),
        "draft_offsets": w["draft_offsets"],
    }
    out = _run_graph(cfg, w, "plain", feeds)
    # independent check of the input path: projection of [hidden, c0 embedding]
    proj = np.stack([talker_hidden, w["c0_embedding"][c0]]).astype(np.float64)
    proj = proj @ w["input_proj.weight"].T + w["input_proj.bias"]
    ref = forward_hidden(cfg, w, proj, feeds["position_ids"], feeds["attention_bias"])
    np.testing.assert_allclose(out["hidden"], ref.hidden, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(
        out["logits"][1], w["heads"][0].astype(np.float64) @ ref.hidden[1], atol=1e-4, rtol=1e-4
    )


# ---------------------------------------------------------------------- errors
def test_missing_tensor_is_named(tmp_path):
    cfg = DepthDecoderConfig(**SMALL)
    write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=0, dtype="f32")
    path = tmp_path / "model.safetensors"
    f = SafetensorsFile(path)
    victim = CP + "model.layers.1.self_attn.k_norm.weight"
    keep = {n: f.get(n) for n in f.keys() if n != victim}
    f.close()
    write_safetensors(path, keep, "f32")
    with pytest.raises(ValueError, match=victim.replace(".", r"\.")):
        load_qwen3_tts_checkpoint(tmp_path)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_qwen3_tts_checkpoint(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_qwen3_tts_checkpoint(tmp_path)
    cfg = DepthDecoderConfig(**SMALL)
    write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=0, dtype="bf16", shards=2)
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002"):
        load_qwen3_tts_checkpoint(tmp_path)
    os.remove(tmp_path / "model.safetensors.index.json")
    os.remove(tmp_path / "model-00001-of-00002.safetensors")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_qwen3_tts_checkpoint(tmp_path)


def test_shape_mismatch_is_named(tmp_path):
    cfg = DepthDecoderConfig(**SMALL)
    write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=0, dtype="f32")
    root = json.loads((tmp_path / "config.json").read_text())
    root["talker_config"]["code_predictor_config"]["intermediate_size"] = 80
    (tmp_path / "config.json").write_text(json.dumps(root))
    with pytest.raises(ValueError, match=r"mlp\.gate_proj"):
        load_qwen3_tts_checkpoint(tmp_path)


def _write_raw(path, header_bytes: bytes, data: bytes = b"", length=None):
    n = len(header_bytes) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header_bytes + data)


def test_malformed_safetensors_headers(tmp_path):
    p = tmp_path / "bad.safetensors"
    _write_raw(p, b"{}", length=10_000)  # length beyond the file
    with pytest.raises(ValueError, match="header length"):
        SafetensorsFile(p)
    _write_raw(p, b"{not json}   ")
    with pytest.raises(ValueError, match="JSON"):
        SafetensorsFile(p)
    _write_raw(p, b"[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        SafetensorsFile(p)
    hdr = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}
    _write_raw(p, json.dumps(hdr).encode(), bytes(16))
    with pytest.raises(ValueError, match="'w'"):
        SafetensorsFile(p)
    hdr = {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    _write_raw(p, json.dumps(hdr).encode(), bytes(8))  # data shorter than the offsets
    with pytest.raises(ValueError, match="out-of-range"):
        SafetensorsFile(p)
    hdr = {"w": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}}
    _write_raw(p, json.dumps(hdr).encode(), bytes(4))
    with pytest.raises(ValueError, match="unsupported dtype"):
        SafetensorsFile(p).get("w")
    p.write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match="shorter than 8 bytes"):
        SafetensorsFile(p)
    # a broken shard inside a checkpoint surfaces with its path
    cfg = DepthDecoderConfig(**SMALL)
    ck = tmp_path / "ck"
    write_synthetic_qwen3_checkpoint(ck, cfg, seed=0)
    _write_raw(ck / "model.safetensors", b"{oops")
    with pytest.raises(ValueError, match="model.safetensors"):
        load_qwen3_tts_checkpoint(ck)


def test_safetensors_dtype_conversions(tmp_path):
    x = np.array([[1.0, -2.5, 3.140625, 1e-3], [65504.0, -0.0, 0.1, 7.0]], np.float32)
    for dtype, expect in [
        ("f32", x),
        ("f16", x.astype(np.float16).astype(np.float32)),
        ("bf16", None),
    ]:
        p = tmp_path / f"{dtype}.safetensors"
        write_safetensors(p, {"x": x}, dtype, {"format": "pt"})
        f = SafetensorsFile(p)
        got = f.get("x")
        assert got.dtype == np.float32 and got.shape == x.shape
        assert f.metadata == {"format": "pt"}
        if expect is not None:
            np.testing.assert_array_equal(got, expect)
        else:
            # bf16 keeps 8 significant bits: exact for these values, within 2^-8 otherwise
            np.testing.assert_allclose(got, x, rtol=2**-8)
            assert got[0, 0] == 1.0 and got[0, 1] == -2.5 and got[0, 2] == 3.140625
        # header is 8-byte aligned like the reference writer's
        (n,) = struct.unpack("<Q", p.read_bytes()[:8])
        assert n % 8 == 0


# ---------------------------------------------------------------------- optional PyTorch parity
def test_parity_with_official_pytorch_code_predictor(tmp_path):
    why = "parity with the official Qwen3-TTS PyTorch code (torch and qwen_tts)"
    torch = pytest.importorskip("torch", reason=why)
    pytest.importorskip("qwen_tts", reason=why)
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSTalkerConfig
    from qwen_tts.core.models.modeling_qwen3_tts import (
        Qwen3TTSTalkerCodePredictorModelForConditionalGeneration as CodePredictor,
    )

    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=48)
    write_synthetic_qwen3_checkpoint(tmp_path, cfg, seed=3, dtype="f32")
    cfg, w = load_qwen3_tts_checkpoint(tmp_path, max_positions=SMALL["max_positions"])
    talker_cfg = Qwen3TTSTalkerConfig(
        **json.loads((tmp_path / "config.json").read_text())["talker_config"]
    )
    cp_cfg = talker_cfg.code_predictor_config
    cp_cfg._attn_implementation = "eager"
    module = CodePredictor(cp_cfg, talker_cfg).eval().float()
    f = SafetensorsFile(tmp_path / "model.safetensors")
    state = {n[len(CP) :]: torch.from_numpy(f.get(n)) for n in f.keys() if n.startswith(CP)}
    module.load_state_dict(state, strict=True)

    # one frame, teacher forced: [talker hidden, c0, c1, c2]
    rng = np.random.default_rng(0)
    codes = [5, 9, 33]
    embeds = np.zeros((4, 48), np.float32)
    embeds[0] = rng.standard_normal(48)
    ids = [zero_row(cfg)] + [embedding_row(cfg, lv, c) for lv, c in enumerate(codes)]
    feeds = example_feeds(cfg, num_query=4, seed=0)
    feeds.update(
        input_ids=np.array(ids, np.int64),
        input_embeds=embeds,
        head_ids=np.array([0, 0, 1, 2], np.int64),
    )
    rows = np.stack(
        [embeds[0], w["c0_embedding"][codes[0]]]
        + [w["code_embeddings"][lv - 1][c] for lv, c in enumerate(codes) if lv > 0]
    )
    with torch.no_grad():
        x = module.small_to_mtp_projection(torch.from_numpy(rows)[None])
        z = module.model(inputs_embeds=x, use_cache=False).last_hidden_state[0]
        logits = torch.stack([module.lm_head[h](z[i]) for i, h in enumerate([0, 0, 1, 2])])
    for variant in _variants():
        out = _run_graph(cfg, w, variant, feeds)
        np.testing.assert_allclose(out["hidden"], z.numpy(), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(out["logits"], logits.numpy(), atol=1e-4, rtol=1e-4)


def test_omitted_head_dim_and_kv_heads_take_the_official_class_defaults():
    import copy

    root = copy.deepcopy(QWEN_0_6B_CONFIG)
    cp = root["talker_config"]["code_predictor_config"]
    del cp["head_dim"], cp["num_key_value_heads"]
    cp["hidden_size"], cp["num_attention_heads"] = 512, 8  # hidden / heads would be 64
    c = config_from_qwen3_tts(root)
    assert c.head_dim == 128 and c.num_kv_heads == 8
