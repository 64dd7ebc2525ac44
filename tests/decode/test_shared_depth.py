"""The shared-parameter depth decoder: tied export, size, losslessness, loading, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from paths import DATA

import codecspec as cs
from codecspec.calibrate.data import teacher_forced_feeds
from codecspec.decode import DepthDecoder
from codecspec.decode.shared_depth import (
    SHARED_FILE,
    SHARED_OFFSETS,
    SHARED_TREE,
    check_depth,
    open_depth_decoder,
)
from codecspec.fidelity import per_position_pvalues
from codecspec.graphs import DepthDecoderConfig, build_depth_graph
from codecspec.graphs.shared import (
    build_shared_graph,
    codebook_features,
    expand_shared,
    load_shared,
    save_shared,
    shared_parameter_count,
    shared_shapes,
)
from codecspec.runtime.session import open_session

CFG = DepthDecoderConfig(
    num_layers=2,
    hidden_size=32,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    num_codebooks=6,
    codebook_size=64,
    c0_vocab_size=64,
    num_draft_offsets=3,
    max_positions=16,
)
TREE = cs.DraftTree.from_paths([(r,) for r in range(6)] + [(0, 0), (0, 1), (1, 0), (0, 0, 0)])
SAMPLED = cs.SamplingParams(0.9, 50, 1.0)


def sticky_shared(c: DepthDecoderConfig, seed: int = 3, sharpness: float = 8.0) -> dict:
    """Random shared weights whose codes repeat across levels (as `drift_weights` does for
    the positional layout): drafts are accepted often, so speculation is exercised."""
    rng = np.random.default_rng(seed)
    H, V = c.hidden_size, c.codebook_size
    a = {}
    for name, shape in shared_shapes(c, True, True).items():
        a[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    U = rng.standard_normal((V, H)).astype(np.float32)
    a["table"] = U
    a["head"] = sharpness * U / H
    a["level_embeddings"] = (
        0.3 * np.arange(c.num_codebooks - 1)[:, None] * rng.standard_normal(H).astype(np.float32)
    )
    for i in range(c.num_layers):
        for n in ("input_norm", "q_norm", "k_norm", "post_norm"):
            a[f"layers.{i}.{n}"] = np.ones_like(a[f"layers.{i}.{n}"])
        a[f"layers.{i}.o_proj"] *= 0.05
        a[f"layers.{i}.down_proj"] *= 0.05
    a["final_norm"] = np.ones(H, np.float32)
    return a


def test_tied_export_matches_the_torch_model():
    torch = pytest.importorskip("torch", reason="exercises the PyTorch model ([train] extra)")
    from codecspec.train.networks import SharedDepthModel, depth_weights

    for share_c0, level in ((True, True), (False, False)):
        torch.manual_seed(0)
        m = SharedDepthModel(CFG, share_c0=share_c0, level_embeddings=level).eval()
        with torch.no_grad():  # non-trivial norms and level vectors, so a missing one shows
            for layer in m.layers:
                for n in (layer.input_norm, layer.q_norm, layer.k_norm, layer.post_norm):
                    n.weight.uniform_(0.5, 1.5)
            if level:
                m.level_embeddings.normal_(0.0, 0.5)
        G = CFG.num_codebooks
        hidden = torch.randn(3, CFG.hidden_size)
        codes = torch.randint(0, CFG.codebook_size, (3, G))
        with torch.no_grad():
            want = m(hidden, codes).numpy()
        w = depth_weights(m)
        # the numpy expansion of the shared tensors is the same export
        _, w2 = expand_shared(
            {
                "format": "codecspec-shared-depth/1",
                "config": CFG.to_dict(),
                "share_c0": share_c0,
                "level_embeddings": level,
            },
            m.shared_arrays(),
        )
        for name in w:
            np.testing.assert_allclose(w2[name], w[name], atol=1e-7, err_msg=name)
        sess = open_session(build_depth_graph(CFG, w, heads="graph").SerializeToString(), "cpu")
        for n in range(3):
            feeds = teacher_forced_feeds(CFG, hidden[n].numpy(), codes[n].numpy())
            logits = sess.run(["logits"], feeds)[0]
            np.testing.assert_allclose(logits[1:], want[n], atol=2e-4, rtol=1e-4)
        # parameters counted once
        n_params = sum(p.numel() for p in m.parameters())
        assert n_params == shared_parameter_count(CFG, share_c0, level)


def test_shared_is_at_most_a_fifth_of_the_positional_decoder_at_the_reference_size():
    torch = pytest.importorskip("torch", reason="exercises the PyTorch model ([train] extra)")
    from codecspec.train.common import reference_depth_config
    from codecspec.train.networks import DepthModel, SharedDepthModel

    with torch.device("meta"):
        pos = DepthModel(reference_depth_config(1024))
        sh = SharedDepthModel(reference_depth_config(1024, num_layers=2))
    n_pos = sum(p.numel() for p in pos.parameters())
    n_sh = sum(p.numel() for p in sh.parameters())
    assert n_sh == shared_parameter_count(reference_depth_config(1024, num_layers=2), True, True)
    assert n_sh <= n_pos / 5, (n_sh, n_pos)


def test_file_round_trip_and_graph_build(tmp_path):
    a = sticky_shared(CFG)
    stored = save_shared(tmp_path / SHARED_FILE, CFG, a, share_c0=True, level_embeddings=True)
    spec, back = load_shared(tmp_path / SHARED_FILE)
    assert spec["share_c0"] and spec["level_embeddings"]
    for k in a:
        np.testing.assert_array_equal(back[k], stored[k])
        np.testing.assert_allclose(back[k], a[k], rtol=2e-3, atol=1e-3)
    graph, heads = build_shared_graph(spec, back)
    assert heads.shape == (CFG.num_codebooks - 1, CFG.codebook_size, CFG.hidden_size)
    assert all(np.array_equal(heads[j], back["head"]) for j in range(len(heads)))
    dec = DepthDecoder(graph, heads=heads, provider="cpu", threads=1)
    assert dec.graph.config == CFG


def _fidelity(dec, n, seed):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n, CFG.input_width)).astype(np.float32)
    c0 = rng.integers(0, CFG.c0_vocab_size, n)
    ar = dec.decode_frames(h, c0, cs.Generator(seed, stream=1), "ar")
    dec.stats.reset()
    spec = dec.decode_frames(h, c0, cs.Generator(seed, stream=2), "spec")
    return per_position_pvalues(ar[:, 1:], spec[:, 1:], CFG.codebook_size), dec.stats


class ShiftedVerifier(DepthDecoder):
    """Deliberately broken: verifies against head(z + b_1), the draft stream's view."""

    def _verify(self, call, tree, n, tokens, heads, g, levels=None):
        shifted = call.hidden[:n] + self.offsets[0]
        return cs.verify_tree_hidden(tree, tokens, shifted, heads, self.bank, self.params, g)


def test_speculation_on_the_shared_decoder_keeps_the_autoregressive_law(tmp_path):
    save_shared(
        tmp_path / SHARED_FILE, CFG, sticky_shared(CFG), share_c0=True, level_embeddings=True
    )
    offsets = 0.3 * np.random.default_rng(0).standard_normal((3, CFG.hidden_size))
    np.save(tmp_path / SHARED_OFFSETS, offsets.astype(np.float32))
    (tmp_path / SHARED_TREE).write_text(TREE.to_json())
    good = open_depth_decoder(tmp_path, "shared", params=SAMPLED, provider="cpu", threads=1)
    assert good.tree.paths == TREE.paths and np.allclose(good.offsets, offsets)
    p, stats = _fidelity(good, 2000, seed=11)
    assert stats.accepted_per_round > 1.0, "speculation must actually be exercised"
    assert stats.calls_per_frame < CFG.num_codebooks - 1
    assert p.min() > 1e-4, f"per-position p-values {p}"

    spec, arrays = load_shared(tmp_path / SHARED_FILE)
    graph, heads = build_shared_graph(spec, arrays)
    broken = ShiftedVerifier(
        graph,
        tree=TREE,
        offsets=good.offsets * 4,
        params=SAMPLED,
        provider="cpu",
        threads=1,
        heads=heads,
    )
    p_bad, _ = _fidelity(broken, 2000, seed=12)
    assert p_bad.min() < 1e-4, "the broken verifier must be caught"


def test_bad_input(tmp_path):
    for bad in ("Shared", "", None, 1):
        with pytest.raises(ValueError, match="depth"):
            check_depth(bad)
    with pytest.raises(FileNotFoundError, match=SHARED_FILE):
        open_depth_decoder(tmp_path, "shared")
    with pytest.raises(ValueError, match="share_c0"):
        shared_shapes(CFG.__class__(**{**CFG.to_dict(), "c0_vocab_size": 40}), True, True)
    a = sticky_shared(CFG)
    kw = dict(share_c0=True, level_embeddings=True)
    with pytest.raises(ValueError, match="missing tensor 'head'"):
        save_shared(tmp_path / "x.npz", CFG, {k: v for k, v in a.items() if k != "head"}, **kw)
    with pytest.raises(ValueError, match="'table' has shape"):
        save_shared(tmp_path / "x.npz", CFG, {**a, "table": a["table"][:3]}, **kw)
    with pytest.raises(ValueError, match="NaN"):
        save_shared(tmp_path / "x.npz", CFG, {**a, "final_norm": a["final_norm"] * np.nan}, **kw)
    with pytest.raises(ValueError, match="unexpected"):
        save_shared(tmp_path / "x.npz", CFG, {**a, "extra": a["head"]}, **kw)
    np.savez(tmp_path / "plain.npz", table=a["table"])
    with pytest.raises(ValueError, match="not a shared depth decoder"):
        load_shared(tmp_path / "plain.npz")

    from codecspec.families.v2.model import V2_FILES, V2TTS

    with pytest.raises(ValueError, match="depth"):
        V2TTS(tmp_path, depth="tied")
    for f in V2_FILES:  # a folder with the positional decoder only
        (tmp_path / f).write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=SHARED_FILE):
        V2TTS(tmp_path, depth="shared")
    from codecspec.pipeline.depth_bench import bench_depth_loop

    with pytest.raises(ValueError, match="depth"):
        bench_depth_loop(tmp_path, 4, depth="both")


def test_torch_model_rejects_bad_configs():
    pytest.importorskip("torch", reason="exercises the PyTorch model ([train] extra)")
    from codecspec.train.networks import SharedDepthModel

    with pytest.raises(ValueError, match="share_c0"):
        SharedDepthModel(CFG.__class__(**{**CFG.to_dict(), "c0_vocab_size": 40}))
    with pytest.raises(ValueError, match="input_proj"):
        SharedDepthModel(CFG.__class__(**{**CFG.to_dict(), "input_hidden_size": 16}))


def test_cli_bench_chooses_the_depth_decoder(tmp_path, capsys):
    import json

    from codecspec.cli import main
    from codecspec.families.v2.model import V2_FORMAT

    save_shared(
        tmp_path / SHARED_FILE, CFG, sticky_shared(CFG), share_c0=True, level_embeddings=True
    )
    (tmp_path / SHARED_TREE).write_text(TREE.to_json())
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "frames.npz",
        hiddens=rng.standard_normal((16, CFG.hidden_size)).astype(np.float16),
        c0s=rng.integers(0, CFG.c0_vocab_size, 16),
    )
    meta = {"format": V2_FORMAT, "sampling": {"temperature": 0.9, "top_k": 50, "top_p": 1.0}}
    (tmp_path / "model.json").write_text(json.dumps(meta))
    argv = ["bench", "--model", str(tmp_path), "--no-pipeline", "--frames", "12", "--json"]
    assert main(argv + ["--depth", "shared", "--threads", "1"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["depth"] == "shared" and res["tree_nodes"] == TREE.num_nodes
    assert res["tokens_per_call"] > 1.0
    # the folder has no positional decoder: a clear error naming the missing file
    assert main(argv + ["--depth", "positional", "--threads", "1"]) == 2
    assert "depth.onnx" in capsys.readouterr().err
    # --depth on a family without a shared decoder
    assert main(["bench", "--model", "reference", "--depth", "shared", "--no-pipeline"]) == 2
    assert "depth" in capsys.readouterr().err


def test_v2_model_runs_either_depth_decoder(tmp_path, capsys):
    """The checked-in tiny v2 folder plus a shared decoder: AR synthesis draws the same number
    of times per frame with either decoder, so c0 (which alone drives the temporal LM) is the
    same and only c1.. differ; speculation runs on the shared one; synth --depth picks it."""
    import json
    import shutil

    from codecspec.cli import main
    from codecspec.families.v2.model import V2TTS

    fixture = DATA / "tiny_v2"
    d = tmp_path / "v2"
    shutil.copytree(fixture, d)
    c = DepthDecoderConfig.from_dict(json.loads((d / "model.json").read_text())["depth_config"])
    save_shared(d / SHARED_FILE, c, sticky_shared(c), share_c0=True, level_embeddings=True)
    (d / SHARED_TREE).write_text(cs.DraftTree.from_paths([(0,), (1,), (0, 0)]).to_json())
    phon = "həlˈoʊ wˈɜːld"
    run = dict(phonemes=phon, seed=4, max_frames=9, decode_audio=False)
    pos = V2TTS(d, provider="cpu").generate("", mode="ar", **run)
    tts = V2TTS(d, provider="cpu", depth="shared")
    assert tts.depth_kind == "shared" and tts.depth.tree.num_nodes == 4
    sh = tts.generate("", mode="ar", **run)
    np.testing.assert_array_equal(sh.codes[:, 0], pos.codes[:, 0])
    assert not np.array_equal(sh.codes[:, 1:], pos.codes[:, 1:])
    spec = tts.generate("", mode="spec", **run)
    assert spec.codes.shape == (9, 16) and spec.tokens_per_call > 1.0
    out = tmp_path / "o.wav"
    argv = ["synth", "--phonemes", phon, "--model", str(d), "--max-frames", "6", "-o", str(out)]
    assert main(argv + ["--depth", "shared", "--json", "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 6 and out.is_file()


# ------------------------------------------------- tied to the codec's RVQ codebooks
def sticky_codebooks(c: DepthDecoderConfig, dim: int = 40, seed: int = 3, sharpness: float = 8.0):
    """(codebooks [G, V, dim], shared arrays) of a codebook-tied decoder whose codes repeat
    across levels: every level has the same codebook and head = sharpness x table / H (dim
    above H, so the tables have full rank and the codes stay apart)."""
    rng = np.random.default_rng(seed)
    cb = np.repeat(rng.standard_normal((1, c.codebook_size, dim)), c.num_codebooks, axis=0)
    cb = cb.astype(np.float16).astype(np.float32)  # what a codec.npz holds
    f = dim + 1
    a = sticky_shared(c, seed)  # its layers, norms and level drift; the table and head go
    del a["table"], a["head"]
    a["in_proj"] = (rng.standard_normal((f, c.hidden_size)) / np.sqrt(f)).astype(np.float32)
    a["out_proj"] = sharpness * a["in_proj"] / c.hidden_size
    return cb, a


def _float16_exact(m) -> None:
    import torch

    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.half().float())


@pytest.mark.parametrize("per_level_head", [False, True])
def test_codebook_tied_export_matches_the_torch_model(tmp_path, per_level_head):
    torch = pytest.importorskip("torch", reason="exercises the PyTorch model ([train] extra)")
    from codecspec.train.networks import SharedDepthModel, depth_weights

    torch.manual_seed(1)
    cb = np.random.default_rng(2).standard_normal((CFG.num_codebooks, CFG.codebook_size, 8))
    cb *= np.linspace(3.0, 0.5, CFG.num_codebooks)[:, None, None]  # levels of other scales
    m = SharedDepthModel(CFG, codebooks=cb, per_level_head=per_level_head).eval()
    with torch.no_grad():
        m.level_embeddings.normal_(0.0, 0.5)
        m.in_proj.normal_(0.0, 0.3)
        m.out_proj.normal_(0.0, 0.3)
    _float16_exact(m)  # stored as float16 without change, so both sides hold the same values
    hidden = torch.randn(3, CFG.hidden_size)
    codes = torch.randint(0, CFG.codebook_size, (3, CFG.num_codebooks))
    with torch.no_grad():
        want = m(hidden, codes).numpy()
    save_shared(tmp_path / SHARED_FILE, CFG, m.shared_arrays(), **m.save_options())
    spec, back = load_shared(tmp_path / SHARED_FILE)
    assert spec["per_level_head"] is per_level_head and "table" not in back
    _, w2 = expand_shared(spec, back, codebooks=cb)
    for name, a in depth_weights(m).items():
        np.testing.assert_allclose(w2[name], a, atol=2e-5, rtol=1e-5, err_msg=name)
    sess = open_session(build_depth_graph(CFG, w2, heads="graph").SerializeToString(), "cpu")
    for n in range(3):
        feeds = teacher_forced_feeds(CFG, hidden[n].numpy(), codes[n].numpy())
        logits = sess.run(["logits"], feeds)[0]
        np.testing.assert_allclose(logits[1:], want[n], atol=2e-4, rtol=1e-4)
    # the codebooks are the codec's: parameters are the two maps, the levels and the body
    tie = {"codebook_features": 9, "per_level_head": per_level_head}
    assert sum(p.numel() for p in m.parameters()) == shared_parameter_count(CFG, True, True, **tie)
    # per_level_head: each level scores through its own out map (the file holds one per
    # level), and a level's heads are its own codebook's features through that map
    assert back["out_proj"].shape == (
        (CFG.num_codebooks - 1, 9, CFG.hidden_size) if per_level_head else (9, CFG.hidden_size)
    )
    phi = codebook_features(cb)
    out = back["out_proj"][-1] if per_level_head else back["out_proj"]
    np.testing.assert_allclose(w2["heads"][-1], phi[-1] @ out, atol=2e-5, rtol=1e-5)


def test_a_codebook_tied_folder_keeps_the_autoregressive_law(tmp_path):
    cb, a = sticky_codebooks(CFG)
    save_shared(tmp_path / SHARED_FILE, CFG, a, share_c0=True, level_embeddings=True, codebooks=cb)
    offsets = 0.3 * np.random.default_rng(0).standard_normal((3, CFG.hidden_size))
    np.save(tmp_path / SHARED_OFFSETS, offsets.astype(np.float32))
    (tmp_path / SHARED_TREE).write_text(TREE.to_json())
    with pytest.raises(FileNotFoundError, match="codec.npz"):
        open_depth_decoder(tmp_path, "shared", provider="cpu", threads=1)
    np.savez(tmp_path / "codec.npz", codebooks=(cb + 0.5).astype(np.float16))
    with pytest.raises(ValueError, match="not the codebooks"):
        open_depth_decoder(tmp_path, "shared", provider="cpu", threads=1)
    np.savez(tmp_path / "codec.npz", codebooks=cb.astype(np.float16))
    good = open_depth_decoder(tmp_path, "shared", params=SAMPLED, provider="cpu", threads=1)
    p, stats = _fidelity(good, 2000, seed=13)
    assert stats.accepted_per_round > 1.0, "speculation must actually be exercised"
    assert p.min() > 1e-4, f"per-position p-values {p}"
    spec, arrays = load_shared(tmp_path / SHARED_FILE)
    graph, heads = build_shared_graph(spec, arrays, codebooks=cb)
    broken = ShiftedVerifier(
        graph, tree=TREE, offsets=good.offsets * 4, params=SAMPLED, provider="cpu", threads=1,
        heads=heads,
    )  # fmt: skip
    p_bad, _ = _fidelity(broken, 2000, seed=14)
    assert p_bad.min() < 1e-4, "the broken verifier must be caught"


def test_codebook_tie_bad_input(tmp_path):
    cb, a = sticky_codebooks(CFG)
    kw = dict(share_c0=True, level_embeddings=True)
    with pytest.raises(ValueError, match="share_c0"):
        shared_shapes(CFG, False, True, codebook_features=41)
    with pytest.raises(ValueError, match="per_level_head"):
        shared_shapes(CFG, True, True, per_level_head=True)
    with pytest.raises(ValueError, match="per_level_head"):
        save_shared(tmp_path / "x.npz", CFG, sticky_shared(CFG), per_level_head=True, **kw)
    with pytest.raises(ValueError, match="'in_proj' has shape"):  # codebooks of another width
        save_shared(tmp_path / "x.npz", CFG, a, codebooks=cb[..., :8], **kw)
    with pytest.raises(ValueError, match="missing tensor 'in_proj'"):
        save_shared(tmp_path / "x.npz", CFG, sticky_shared(CFG), codebooks=cb, **kw)
    save_shared(tmp_path / SHARED_FILE, CFG, a, codebooks=cb, **kw)
    spec, back = load_shared(tmp_path / SHARED_FILE)
    with pytest.raises(ValueError, match="tied to the codec"):
        expand_shared(spec, back)
    with pytest.raises(ValueError, match=r"codebooks: expected"):
        expand_shared(spec, back, codebooks=cb[:2])
    with pytest.raises(ValueError, match="not the codebooks"):
        expand_shared(spec, back, codebooks=cb * 2)
    for bad in (np.zeros((CFG.num_codebooks, 64, 8)), np.full((2, 3, 4), np.nan), np.ones(5)):
        with pytest.raises(ValueError, match="codebooks"):
            codebook_features(bad)
    with pytest.raises(ValueError, match="codebooks_sha256"):
        expand_shared(
            {k: v for k, v in spec.items() if k != "codebooks_sha256"}, back, codebooks=cb
        )
    with pytest.raises(ValueError, match="codebook_features"):
        expand_shared({**spec, "codebook_features": "9"}, back, codebooks=cb)


def test_warm_start_recovers_a_teacher_whose_tables_are_maps_of_the_codebooks():
    """A per-position teacher whose tables and heads are exactly (level-wise) linear maps of
    the codebook features: the warm start's least squares recovers them, so a shared decoder
    of the teacher's depth computes the teacher's logits."""
    torch = pytest.importorskip("torch", reason="exercises the PyTorch model ([train] extra)")
    from codecspec.graphs.shared import codebook_features
    from codecspec.train.networks import DepthModel, SharedDepthModel

    torch.manual_seed(3)
    G, F = CFG.num_codebooks, 9
    cb = np.random.default_rng(4).standard_normal((G, CFG.codebook_size, F - 1))
    phi = torch.as_tensor(codebook_features(cb))
    teacher = DepthModel(CFG).eval()
    q, lv = torch.randn(F, CFG.hidden_size) * 0.1, torch.randn(G - 1, CFG.hidden_size) * 0.1
    p = torch.randn(G - 1, F, CFG.hidden_size) * 0.1
    with torch.no_grad():
        teacher.c0_embedding.weight.copy_(phi[0] @ q + lv[0])
        teacher.code_embeddings[: G - 2].copy_(phi[1 : G - 1] @ q + lv[1:, None])
        teacher.heads.copy_(phi[1:] @ p)
    student = SharedDepthModel(CFG, codebooks=cb, per_level_head=True).eval()
    student.warm_start(teacher)
    hidden = torch.randn(4, CFG.hidden_size)
    codes = torch.randint(0, CFG.codebook_size, (4, G))
    with torch.no_grad():
        np.testing.assert_allclose(student(hidden, codes), teacher(hidden, codes), atol=1e-3)
    shared_head = SharedDepthModel(CFG, codebooks=cb).eval()
    shared_head.warm_start(teacher)  # one out map cannot fit five: it must differ
    with torch.no_grad():
        assert not np.allclose(shared_head(hidden, codes), teacher(hidden, codes), atol=1e-2)
    with pytest.raises(ValueError, match="warm_start"):
        SharedDepthModel(CFG).warm_start(teacher)
    deeper = CFG.__class__(**{**CFG.to_dict(), "num_layers": 3})
    with pytest.raises(ValueError, match="teacher"):
        SharedDepthModel(deeper, codebooks=cb).warm_start(teacher)
