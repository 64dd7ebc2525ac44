"""ONNX depth-decoder graphs (codecspec.graphs) against the numpy reference."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")

from codecspec.graphs import (  # noqa: E402
    INPUT_NAMES,
    OUTPUT_NAMES,
    DepthDecoderConfig,
    DepthDecoderWeights,
    build_depth_graph,
    compute_head_logits,
    count_nodes,
    cpu_variant_supported,
    embedding_row,
    example_feeds,
    expected_shapes,
    graph_io_names,
    load_npz_config,
    qwen3_tts_0_6b,
    read_graph_config,
    read_graph_metadata,
    reference_run,
    save_model,
    table_layout,
    tree_attention_bias,
    zero_row,
)
from codecspec.graphs.reference import forward_hidden, input_hidden  # noqa: E402
from codecspec.runtime.session import open_session  # noqa: E402

ATOL = 1e-4
RTOL = 1e-4

SMALL = dict(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=96,
    num_codebooks=6,
    codebook_size=128,
    c0_vocab_size=160,
    num_draft_offsets=3,
    max_positions=16,
)
TREE = [-1, 0, 0, 1, 1, 2, 3, 3]  # 8 nodes, depth up to 3


def _variants():
    out = ["plain"]
    if cpu_variant_supported():
        out.append("cpu")
    return out


VARIANTS = _variants()


@pytest.fixture(scope="module", params=[None, 48], ids=["no_proj", "proj"])
def model_setup(request):
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=request.param)
    return cfg, DepthDecoderWeights.random(cfg, seed=7)


_SESSIONS: dict = {}


def _session(cfg, w, variant, heads, opset=17):
    key = (cfg, id(w), variant, heads, opset)
    if key not in _SESSIONS:
        model = build_depth_graph(cfg, w, variant=variant, heads=heads, opset=opset)
        s = open_session(model.SerializeToString(), provider="cpu")
        _SESSIONS[key] = (s, w)  # holding w keeps its id from being reused
    return _SESSIONS[key][0]


def _run(sess, feeds) -> dict:
    names = [i.name for i in sess.get_inputs()]
    outs = sess.run(None, {n: feeds[n] for n in names})
    return dict(zip([o.name for o in sess.get_outputs()], outs))


def _close(actual, expected, what=""):
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=RTOL, err_msg=what)


def _entropy(logits):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(-1, keepdims=True)
    return -(p * np.log(np.maximum(p, 1e-300))).sum(-1)


# ---------------------------------------------------------------------- config
def test_config_json_round_trip_and_preset():
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=48)
    again = DepthDecoderConfig.from_json(cfg.to_json())
    assert again == cfg
    q = qwen3_tts_0_6b()
    assert (q.num_layers, q.hidden_size, q.num_heads, q.num_kv_heads, q.head_dim) == (
        5,
        1024,
        16,
        8,
        128,
    )
    assert (q.intermediate_size, q.rope_theta, q.num_codebooks, q.codebook_size) == (
        3072,
        1e6,
        16,
        2048,
    )
    assert q.c0_vocab_size == 3072 and q.input_hidden_size is None and q.rms_norm_eps == 1e-6
    assert DepthDecoderConfig.from_json(q.to_json()) == q


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_layers", 0),
        ("hidden_size", -1),
        ("num_heads", 2.5),
        ("num_kv_heads", 3),  # does not divide num_heads=4
        ("head_dim", 15),
        ("intermediate_size", True),
        ("rms_norm_eps", 0.0),
        ("rope_theta", float("inf")),
        ("num_codebooks", 1),
        ("codebook_size", 0),
        ("c0_vocab_size", "3072"),
        ("input_hidden_size", 0),
        ("num_draft_offsets", 0),
        ("max_positions", 0),
    ],
)
def test_config_validation_names_field(field, value):
    kw = dict(SMALL)
    kw[field] = value
    with pytest.raises(ValueError, match=field):
        DepthDecoderConfig(**kw)


def test_config_from_json_errors():
    d = DepthDecoderConfig(**SMALL).to_dict()
    with pytest.raises(ValueError, match="bogus"):
        DepthDecoderConfig.from_dict({**d, "bogus": 1})
    d.pop("head_dim")
    with pytest.raises(ValueError, match="head_dim"):
        DepthDecoderConfig.from_dict(d)
    with pytest.raises(ValueError, match="JSON"):
        DepthDecoderConfig.from_json("{not json")


def test_embedding_rows_and_layout():
    cfg = DepthDecoderConfig(**SMALL)
    assert embedding_row(cfg, 0, 5) == 5
    assert embedding_row(cfg, 1, 0) == cfg.c0_vocab_size
    assert embedding_row(cfg, 3, 7) == cfg.c0_vocab_size + 2 * cfg.codebook_size + 7
    assert zero_row(cfg) == cfg.c0_vocab_size + (cfg.num_codebooks - 1) * cfg.codebook_size
    rows = embedding_row(cfg, np.array([0, 1, 5]), np.array([159, 127, 0]))
    assert rows.dtype == np.int64 and rows.tolist() == [159, 160 + 127, 160 + 4 * 128]
    assert table_layout(cfg)["zero_row"] == zero_row(cfg) == cfg.table_rows - 1
    for bad in [(0, 160), (1, 128), (6, 0), (-1, 0), (1, -1)]:
        with pytest.raises(ValueError):
            embedding_row(cfg, *bad)


# ---------------------------------------------------------------------- weights
def test_weights_validate_and_npz(tmp_path):
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=48)
    w = DepthDecoderWeights.random(cfg, seed=1)
    w.validate(cfg)
    assert set(w) == set(expected_shapes(cfg))
    assert all(a.dtype == np.float32 for a in w.values())
    w2 = DepthDecoderWeights.random(cfg, seed=1)
    assert all(np.array_equal(w[k], w2[k]) for k in w)

    path = tmp_path / "w.npz"
    w.save_npz(path, config=cfg)
    back = DepthDecoderWeights.load_npz(path)
    assert set(back) == set(w) and all(np.array_equal(back[k], w[k]) for k in w)
    assert load_npz_config(path) == cfg

    bad = DepthDecoderWeights(dict(w))
    del bad["layers.1.k_norm"]
    with pytest.raises(ValueError, match=r"layers\.1\.k_norm"):
        bad.validate(cfg)
    bad = DepthDecoderWeights(dict(w))
    bad["heads"] = bad["heads"][:, :3]
    with pytest.raises(ValueError, match="heads"):
        bad.validate(cfg)
    bad = DepthDecoderWeights(dict(w))
    bad["extra"] = np.zeros(3)
    with pytest.raises(ValueError, match="extra"):
        bad.validate(cfg)
    bad = DepthDecoderWeights(dict(w))
    bad["final_norm"] = np.full(cfg.hidden_size, np.nan)
    with pytest.raises(ValueError, match="final_norm"):
        bad.validate(cfg)
    # an explicit input_hidden_size (even equal to hidden_size) means a projection exists
    plain = DepthDecoderWeights.random(DepthDecoderConfig(**SMALL), seed=1)
    with pytest.raises(ValueError, match="input_proj"):
        plain.validate(DepthDecoderConfig(**SMALL, input_hidden_size=SMALL["hidden_size"]))


def test_random_weights_give_a_few_nats(model_setup):
    cfg, w = model_setup
    feeds = example_feeds(cfg, num_query=6, seed=3, draft_offsets=w["draft_offsets"])
    ref = reference_run(cfg, w, feeds)
    ent = _entropy(np.concatenate([ref["logits"], ref["draft_logits"].reshape(-1, 128)]))
    assert np.all(ent > 0.1), ent  # never one-hot
    assert 1.0 < ent.mean() < np.log(cfg.codebook_size) - 1.0, ent  # never near uniform


# ---------------------------------------------------------------------- graph vs reference
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("heads", ["graph", "hidden"])
@pytest.mark.parametrize(
    "past,parents",
    [
        (0, [-1, 0]),
        (0, TREE),
        (3, TREE),
        (5, [-1]),
        (2, [-1, 0, 0, 0, 1, 2, 3]),
        (1, [-1] + [0] * 20),  # more query tokens than max_positions (16)
    ],
    ids=["prefill2", "tree_p0", "tree_p3", "step_p5", "wide_p2", "star21_p1"],
)
def test_graph_matches_reference(model_setup, variant, heads, past, parents):
    cfg, w = model_setup
    feeds = example_feeds(cfg, past_len=past, parents=parents, seed=past + len(parents))
    feeds["draft_offsets"] = w["draft_offsets"]  # trained-like, non-zero offsets
    out = _run(_session(cfg, w, variant, heads), feeds)
    ref = reference_run(cfg, w, feeds, heads=heads)
    assert set(out) == set(graph_io_names(heads)[1])
    for name, value in ref.items():
        assert out[name].dtype == np.float32
        assert out[name].shape == value.shape, name
        _close(out[name], value, name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gqa_free_single_head_edge_config(variant):
    # MHA (kv heads = heads), one layer, G = 2 (a single LM head: every draft head clamps to 0)
    cfg = DepthDecoderConfig(
        num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=2, head_dim=16,
        intermediate_size=48, num_codebooks=2, codebook_size=64, c0_vocab_size=70,
        num_draft_offsets=2, max_positions=8,
    )  # fmt: skip
    w = DepthDecoderWeights.random(cfg, seed=3)
    feeds = example_feeds(cfg, past_len=1, parents=[-1, 0, 0], seed=1)
    feeds["draft_offsets"] = w["draft_offsets"]
    out = _run(_session(cfg, w, variant, "graph"), feeds)
    ref = reference_run(cfg, w, feeds)
    for name in OUTPUT_NAMES:
        _close(out[name], ref[name], name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_opset_13_builds_and_runs(model_setup, variant):
    cfg, w = model_setup
    feeds = example_feeds(cfg, past_len=2, parents=TREE[:5], seed=4)
    out = _run(_session(cfg, w, variant, "graph", opset=13), feeds)
    _close(out["logits"], reference_run(cfg, w, feeds)["logits"])


def test_plain_variant_is_standard_onnx(model_setup):
    cfg, w = model_setup
    for heads in ("graph", "hidden"):
        model = build_depth_graph(cfg, w, variant="plain", heads=heads)
        assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
        assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
        onnx.checker.check_model(model, full_check=True)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        assert len(inferred.graph.output) == len(graph_io_names(heads)[1])


def test_node_counts_and_io_names(model_setup):
    cfg, w = model_setup
    counts = {}
    for variant in VARIANTS:
        for heads in ("graph", "hidden"):
            m = build_depth_graph(cfg, w, variant=variant, heads=heads)
            ins, outs = graph_io_names(heads)
            assert [i.name for i in m.graph.input] == list(ins)
            assert [o.name for o in m.graph.output] == list(outs)
            counts[variant, heads] = count_nodes(m)
    assert graph_io_names("graph") == (INPUT_NAMES, OUTPUT_NAMES)
    if "cpu" in VARIANTS:
        assert counts["cpu", "graph"] < counts["plain", "graph"]
    # per-layer cost stays small: a few dozen nodes at most
    assert counts["plain", "hidden"] < 50 * cfg.num_layers + 40


# ---------------------------------------------------------------------- KV cache semantics
@pytest.mark.parametrize("variant", VARIANTS)
def test_prefix_in_one_call_equals_token_by_token(model_setup, variant):
    cfg, w = model_setup
    n = 6
    full = example_feeds(cfg, num_query=n, seed=11)  # chain 0..n-1, causal bias
    full["draft_offsets"] = w["draft_offsets"]
    sess = _session(cfg, w, variant, "graph")
    one = _run(sess, full)

    L, kvh, hd = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
    past_k = np.zeros((L, kvh, 0, hd), np.float32)
    past_v = np.zeros((L, kvh, 0, hd), np.float32)
    for t in range(n):
        step = {
            "input_ids": full["input_ids"][t : t + 1],
            "input_embeds": full["input_embeds"][t : t + 1],
            "position_ids": full["position_ids"][t : t + 1],
            "attention_bias": np.zeros((1, t + 1), np.float32),
            "past_keys": past_k,
            "past_values": past_v,
            "head_ids": full["head_ids"][t : t + 1],
            "draft_offsets": full["draft_offsets"],
        }
        out = _run(sess, step)
        for name in ("logits", "draft_logits", "hidden"):
            _close(out[name][0], one[name][t], f"{name} at step {t}")
        _close(out["new_keys"][:, :, 0], one["new_keys"][:, :, t], f"keys at step {t}")
        _close(out["new_values"][:, :, 0], one["new_values"][:, :, t], f"values at step {t}")
        past_k = np.concatenate([past_k, out["new_keys"]], axis=2)
        past_v = np.concatenate([past_v, out["new_values"]], axis=2)


@pytest.mark.parametrize("variant", VARIANTS)
def test_tree_node_equals_its_root_path_as_a_chain(model_setup, variant):
    cfg, w = model_setup
    past = 2
    tree = example_feeds(cfg, past_len=past, parents=TREE, seed=5)
    sess = _session(cfg, w, variant, "graph")
    out_tree = _run(sess, tree)
    for node in (3, 5, 7):
        path = [node]
        while TREE[path[-1]] > 0:
            path.append(TREE[path[-1]])
        path = [0] + path[::-1]
        chain = {
            k: tree[k][path] for k in ("input_ids", "input_embeds", "position_ids", "head_ids")
        }
        chain.update(
            attention_bias=tree_attention_bias(list(range(-1, len(path) - 1)), past),
            past_keys=tree["past_keys"],
            past_values=tree["past_values"],
            draft_offsets=tree["draft_offsets"],
        )
        out_chain = _run(sess, chain)
        for name in ("logits", "hidden"):
            _close(out_chain[name][-1], out_tree[name][node], f"{name} of node {node}")
        _close(out_chain["new_keys"][:, :, -1], out_tree["new_keys"][:, :, node])


# ---------------------------------------------------------------------- heads
@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_offset_drafts_equal_next_heads_verify_logits(model_setup, variant):
    cfg, w = model_setup
    feeds = example_feeds(cfg, past_len=1, parents=TREE, seed=9)  # zero offsets
    sess = _session(cfg, w, variant, "graph")
    base = _run(sess, feeds)
    last = cfg.num_lm_heads - 1
    for j in range(1, cfg.num_draft_offsets + 1):
        shifted = dict(feeds, head_ids=np.minimum(feeds["head_ids"] + j, last))
        out = _run(sess, shifted)
        _close(base["draft_logits"][:, j - 1], out["logits"], f"offset {j}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_hidden_mode_plus_host_heads_equals_graph_heads(model_setup, variant):
    cfg, w = model_setup
    feeds = example_feeds(cfg, past_len=4, parents=TREE, seed=2)
    feeds["draft_offsets"] = w["draft_offsets"]
    g = _run(_session(cfg, w, variant, "graph"), feeds)
    h = _run(_session(cfg, w, variant, "hidden"), feeds)
    logits, draft = compute_head_logits(
        w["heads"], h["hidden"], feeds["head_ids"], feeds["draft_offsets"]
    )
    _close(logits, g["logits"])
    _close(draft, g["draft_logits"])
    logits_only, none = compute_head_logits(w["heads"], h["hidden"], feeds["head_ids"])
    assert none is None and np.array_equal(logits_only, logits)


def test_compute_head_logits_validation():
    heads = np.zeros((3, 5, 4), np.float32)
    hid = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="head_ids"):
        compute_head_logits(heads, hid, np.array([0, 3]))
    with pytest.raises(ValueError, match="hidden"):
        compute_head_logits(heads, np.zeros((2, 5)), np.array([0, 1]))
    with pytest.raises(ValueError, match="draft_offsets"):
        compute_head_logits(heads, hid, np.array([0, 1]), np.zeros((2, 3)))


# ---------------------------------------------------------------------- reference details
def test_reference_input_path_and_errors():
    cfg = DepthDecoderConfig(**SMALL, input_hidden_size=48)
    w = DepthDecoderWeights.random(cfg, seed=0)
    ids = np.array([embedding_row(cfg, 0, 3), embedding_row(cfg, 2, 9), zero_row(cfg)])
    e = np.random.default_rng(0).standard_normal((3, 48))
    x = input_hidden(cfg, w, ids, e)
    rows = np.stack([w["c0_embedding"][3], w["code_embeddings"][1, 9], np.zeros(48)])
    expect = (rows + e) @ w["input_proj.weight"].T.astype(np.float64) + w["input_proj.bias"]
    np.testing.assert_allclose(x, expect, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="input_ids"):
        input_hidden(cfg, w, np.array([cfg.table_rows]), np.zeros((1, 48)))
    bias = np.full((1, 1), -np.inf, np.float32)
    with pytest.raises(ValueError, match="hides every key"):
        forward_hidden(cfg, w, np.zeros((1, cfg.hidden_size)), np.array([0]), bias)
    with pytest.raises(ValueError, match="attention_bias"):
        forward_hidden(cfg, w, np.zeros((1, cfg.hidden_size)), np.array([0]), np.zeros((1, 2)))


def test_tree_attention_bias():
    b = tree_attention_bias([-1, 0, 0, 1], past_len=2)
    visible = np.isfinite(b)
    assert visible[:, :2].all()
    assert visible[:, 2:].tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, False, True, False],
        [True, True, False, True],
    ]
    with pytest.raises(ValueError):
        tree_attention_bias([-1, 1], past_len=0)


# ---------------------------------------------------------------------- metadata and files
def test_metadata_and_save_load(tmp_path, model_setup):
    cfg, w = model_setup
    variant = VARIANTS[-1]
    model = build_depth_graph(cfg, w, variant=variant, heads="graph")
    assert read_graph_config(model) == cfg
    meta = read_graph_metadata(model)
    assert meta["graph_version"] == "1" and meta["variant"] == variant
    assert meta["heads"] == "graph" and meta["table_layout"] == json.loads(
        json.dumps(table_layout(cfg))
    )
    assert meta["io"]["inputs"] == list(INPUT_NAMES)

    feeds = example_feeds(cfg, past_len=2, parents=TREE, seed=1)
    expect = _run(_session(cfg, w, variant, "graph"), feeds)
    for external in (False, True):
        path = tmp_path / f"depth_{external}.onnx"
        save_model(model, path, external_data=external)
        assert (tmp_path / f"depth_{external}.onnx.data").exists() == external
        if external:  # the weights are as readable as the graph (onnx writes them 0600)
            mode = (tmp_path / f"depth_{external}.onnx").stat().st_mode & 0o777
            assert (tmp_path / f"depth_{external}.onnx.data").stat().st_mode & 0o777 == mode
        assert read_graph_config(path) == cfg
        s = open_session(path, provider="cpu")
        got = _run(s, feeds)
        for name in OUTPUT_NAMES:
            np.testing.assert_array_equal(got[name], expect[name])
    # saving externally left the in-memory model intact
    assert all(not t.external_data for t in model.graph.initializer)

    stranger = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    with pytest.raises(ValueError, match="codecspec"):
        read_graph_config(stranger)


def test_build_argument_errors(model_setup):
    cfg, w = model_setup
    with pytest.raises(ValueError, match="variant"):
        build_depth_graph(cfg, w, variant="gpu")
    with pytest.raises(ValueError, match="heads"):
        build_depth_graph(cfg, w, heads="both")
    with pytest.raises(ValueError, match="opset"):
        build_depth_graph(cfg, w, opset=18)
    bad = DepthDecoderWeights(dict(w))
    del bad["heads"]
    with pytest.raises(ValueError, match="heads"):
        build_depth_graph(cfg, bad)
    other = dataclasses.replace(cfg, num_layers=3)
    with pytest.raises(ValueError, match="layers.2"):
        build_depth_graph(other, w)


def test_reference_float32_mode_stays_float32(model_setup):
    cfg, w = model_setup
    feeds = example_feeds(cfg, past_len=2, parents=TREE, seed=8, draft_offsets=w["draft_offsets"])
    r32 = reference_run(cfg, w, feeds, dtype=np.float32)
    r64 = reference_run(cfg, w, feeds)
    for name, value in r64.items():
        assert r32[name].dtype == np.float32, name
        _close(r32[name], value, name)
