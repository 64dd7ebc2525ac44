"""Weight-only quantisation (graphs.quantize) and the code predictor's heads in the graph
(heads="grouped"): one law whatever the verify call holds, speculation lossless with respect
to the quantised model, and Qwen3-TTS folders at every precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from paths import DATA

import codecspec as cs
from codecspec.calibrate.data import drift_weights
from codecspec.decode import DepthDecoder
from codecspec.fidelity import per_position_pvalues
from codecspec.graphs import DepthDecoderConfig, build_depth_graph
from codecspec.graphs.quantize import BLOCK_SIZES, default_weights, quantize_weights
from codecspec.graphs.row_probe import (
    ROW_EXACT_LAYOUTS,
    activation_half_steps,
    matmul_model,
    nbits_node,
    probe_rows,
    probe_weights,
    rounding_bound,
    row_exact_block,
    row_exact_layout,
    together_and_alone,
)
from codecspec.runtime.kv import KVCache

pytest.importorskip("onnx_ir", reason="onnxruntime's MatMulNBits quantiser needs onnx_ir")

CFG = DepthDecoderConfig(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    num_codebooks=6,
    codebook_size=32,
    c0_vocab_size=40,
    num_draft_offsets=3,
    max_positions=16,
)
SAMPLED = cs.SamplingParams(0.9, 50, 1.0)
TREE = cs.DraftTree.from_paths([(0,), (1,), (0, 0), (0, 0, 0)])
QWEN3 = DATA / "qwen3_tiny"


@pytest.fixture(scope="module")
def weights():
    return drift_weights(CFG, seed=3, sharpness=30.0, drift=0.6)


@pytest.fixture(scope="module")
def grouped(weights):
    return build_depth_graph(CFG, weights, heads="grouped")


def _rows_alone_and_together(model, n=5, drafts=None):
    """Logits of n query rows scored in one call and each row in a call of its own."""
    from codecspec.runtime.depth_graph import DepthGraph

    g = DepthGraph(model, provider="cpu", threads=1)
    cache = KVCache(CFG.num_layers, CFG.num_kv_heads, CFG.head_dim, 2)
    rng = np.random.default_rng(0)
    embeds = rng.standard_normal((n, CFG.hidden_size)).astype(np.float32)
    heads = rng.integers(0, CFG.num_lm_heads, n)

    def call(rows):
        c = g.bind(len(rows), cache.keys, cache.values, drafts)
        c.embeds[:] = embeds[rows]
        c.ids[:] = CFG.table_rows - 1  # the zero row: inputs through input_embeds
        c.pos[:] = 0
        c.bias[...] = -np.inf
        c.bias[:, 2:] = np.where(np.eye(len(rows)) > 0, 0.0, -np.inf)  # each row sees itself
        c.heads[:] = heads[rows]
        c.run()
        return c.logits.copy()

    together = call(list(range(n)))
    alone = np.concatenate([call([i]) for i in range(n)])
    return together, alone


@pytest.mark.parametrize("weights_kind", ["int8", "int4"])
def test_a_rows_logits_do_not_depend_on_the_other_rows_of_its_call(grouped, weights_kind):
    """MatMulNBits quantises each activation row on its own, so a tree node's logits do not
    depend on the rest of its verify call: the same bits where this CPU's kernel computes a
    row the same way for every call size (AVX-512; int8 on AVX2), within the float rounding
    of each MatMul's sum where it does not (int4 on AVX2: a one-row kernel and a tiled one)."""
    model = quantize_weights(grouped, weights_kind)
    probe = probe_rows(model, weights_kind, threads=1)
    assert probe.within_rounding, probe.to_dict()
    together, alone = _rows_alone_and_together(model)
    if probe.row_independent:
        np.testing.assert_array_equal(together, alone)


def _quantize_dynamic(model):
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "f.onnx", Path(d) / "q.onnx"
        onnx.save_model(model, src)
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        q = onnx.load(str(dst))
    assert "MatMulInteger" in {n.op_type for n in q.graph.node}
    return q


def _first_matmul_weight(model) -> np.ndarray:
    inits = {t.name: t for t in model.graph.initializer}
    name = next(
        n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits
    )
    return onnx.numpy_helper.to_array(inits[name])


def test_dynamic_quantisation_would_couple_the_rows_of_a_call(grouped):
    """The broken variant: quantize_dynamic scales a whole call's activations with one
    number, so a row's logits change with its neighbours (why codecspec does not use it).
    Caught on every CPU: its rows are not the same bits (what row-independent kernels keep),
    and one of its MatMuls moves rows by more than the rounding bound that MatMulNBits meets
    at either precision."""
    from codecspec.runtime.session import open_session

    together, alone = _rows_alone_and_together(_quantize_dynamic(grouped))
    assert not np.array_equal(together, alone)
    W = _first_matmul_weight(grouped)
    mm = matmul_model(W)
    x = np.random.default_rng(0).standard_normal((17, W.shape[0])).astype(np.float32)
    coupled = together_and_alone(
        open_session(_quantize_dynamic(mm).SerializeToString(), "cpu", 1), x, (2, 5, 17)
    )
    for weights in ("int8", "int4"):
        q = quantize_weights(mm, weights)
        w = nbits_node(q.graph.node[0], {t.name: t for t in q.graph.initializer})
        for t, a in coupled:
            assert (np.abs(t - a) > rounding_bound(w, x[: len(t)])).any(), (weights, len(t))


@pytest.mark.parametrize("weights_kind", ["int8", "int4"])
def test_the_probe_reads_the_weights_the_kernel_multiplies_by(grouped, weights_kind):
    """The rounding bound is only as good as the weights it is computed from: x @ w~ (the
    probe's dequantised weights) is within half an activation step per input of the
    kernel's output, plus its rounding."""
    from codecspec.runtime.session import open_session

    W = _first_matmul_weight(grouped)
    q = quantize_weights(matmul_model(W), weights_kind)
    w = nbits_node(q.graph.node[0], {t.name: t for t in q.graph.initializer})
    x = np.random.default_rng(1).standard_normal((5, w.q.shape[0])).astype(np.float32)
    got = open_session(q.SerializeToString(), "cpu", 1).run(None, {"x": x})[0]
    wd = w.dequantized()
    slack = activation_half_steps(x, w.block_size) @ np.abs(wd) + rounding_bound(w, x)
    assert (np.abs(got - x @ wd) <= slack).all()
    assert (np.abs(wd - W) <= np.abs(w.scale)).all()  # within a step (clipping included)


def test_grouped_heads_score_like_gathered_heads(weights, grouped):
    """heads="grouped" (one MatMul per head) = heads="graph" (gathered head matrices)."""
    gathered = build_depth_graph(CFG, weights, heads="graph")
    a, _ = _rows_alone_and_together(grouped, drafts=CFG.num_draft_offsets)
    b, _ = _rows_alone_and_together(gathered)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_quantisation_shrinks_the_weights_and_int4_errs_more_than_int8(grouped):
    from codecspec.perf import graph_reads

    size = {w: graph_reads(quantize_weights(grouped, w)).per_call(1) for w in ("int8", "int4")}
    size["fp32"] = graph_reads(grouped).per_call(1)
    assert size["int4"] < size["int8"] < size["fp32"] / 2
    err = {}
    ref, _ = _rows_alone_and_together(grouped)
    for w in ("int8", "int4"):
        got, _ = _rows_alone_and_together(quantize_weights(grouped, w))
        err[w] = np.abs(got - ref).max()
    assert 0 < err["int8"] < err["int4"]


def test_bad_weights_name_the_argument(grouped):
    with pytest.raises(ValueError, match="^weights:"):
        quantize_weights(grouped, "int3")
    # exact by default: the official model's numbers on every provider (issue 26)
    assert default_weights("CPUExecutionProvider") == "fp32"
    assert default_weights("CUDAExecutionProvider") == "fp32"


def test_each_precision_quantises_with_its_own_block_size(grouped):
    def block_sizes(model):
        return {
            a.i
            for n in model.graph.node
            if n.op_type == "MatMulNBits"
            for a in n.attribute
            if a.name == "block_size"
        }

    assert block_sizes(quantize_weights(grouped, "int8")) == {BLOCK_SIZES["int8"]} == {128}
    assert block_sizes(quantize_weights(grouped, "int4")) == {BLOCK_SIZES["int4"]} == {32}
    assert block_sizes(quantize_weights(grouped, "int8", block_size=32)) == {32}
    for bad in (8, 48, 64.0, True):
        with pytest.raises(ValueError, match="^block_size:"):
            quantize_weights(grouped, "int8", block_size=bad)


class DraftHeadVerifier(DepthDecoder):
    """Deliberately broken: verifies against the first draft head's view of each node
    (the next level's head over the node's state plus the first offset)."""

    def _verify(self, call, tree, n, tokens, heads, g):
        return cs.verify_tree(tree, tokens, call.draft_logits[:n, 0], self.params, g)


def _law(dec, n, seed):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((n, CFG.hidden_size)).astype(np.float32)
    c0 = rng.integers(0, CFG.c0_vocab_size, n)
    ar = dec.decode_frames(h, c0, cs.Generator(seed, stream=1), "ar")
    dec.stats.reset()
    spec = dec.decode_frames(h, c0, cs.Generator(seed, stream=2), "spec")
    return per_position_pvalues(ar[:, 1:], spec[:, 1:], CFG.codebook_size), dec.stats


@pytest.mark.slow
def test_speculation_keeps_the_quantised_models_law(grouped):
    model = quantize_weights(grouped, "int8")
    kw = dict(tree=TREE, params=SAMPLED, provider="cpu", threads=1)
    p, stats = _law(DepthDecoder(model, **kw), 6000, seed=21)
    assert stats.accepted_per_round > 0.5, "the speculative path must be exercised"
    assert p.min() > 1e-4, f"per-position p-values {p}"
    offsets = 4 * np.random.default_rng(0).standard_normal((3, CFG.hidden_size))
    p_bad, _ = _law(DraftHeadVerifier(model, offsets=offsets, **kw), 3000, seed=22)
    assert p_bad.min() < 1e-4, "the broken verifier must be caught"


def test_a_verifying_graph_takes_the_first_layout_whose_rows_are_the_same_bits_here():
    """Which kernel serves a call depends on the block size and on whether a row is alone
    (AVX-512 EPYC: 8-bit blocks of 128 and 4-bit blocks of 64 and 128 compute rows in pairs
    and a lone row by another path): the code predictor's (block, row multiple) is the first
    candidate whose rows are the same bits on this CPU, judged by the probe itself here."""
    for weights, layouts in ROW_EXACT_LAYOUTS.items():
        alike = {
            (b, m): probe_weights(
                weights,
                (512, 512),
                rows=(2, 4, 5, 17) if m == 1 else (2, 4, 6, 16),
                block_size=b,
                row_multiple=m,
            ).row_independent
            for b, m in layouts
        }
        want = next((lay for lay in layouts if alike[lay]), (BLOCK_SIZES[weights], 1))
        assert row_exact_layout(weights) == want


def test_the_pair_probe_tells_a_padded_law_from_a_lone_rows_law():
    """A row in a call of 3 is computed alone where pairs and lone rows differ: the padded
    law (calls of even sizes) may hold while the unpadded one fails, never the reverse."""
    for b in (32, 128):
        lone = probe_weights("int4", (512, 512), rows=(2, 3, 5), block_size=b).row_independent
        paired = probe_weights(
            "int4", (512, 512), rows=(2, 4, 6), block_size=b, row_multiple=2
        ).row_independent
        assert paired or not lone


def _passes_over_inexact_layouts(choose) -> bool:
    asked = []

    def probe(weights, block, multiple, threads):  # rows differ in 128 unless paired
        asked.append((block, multiple))
        return block != 128 or multiple == 2

    return choose("int4", probe=probe) == (128, 2) and asked == [(128, 1), (128, 2)]


def test_a_layout_whose_rows_differ_is_passed_over_and_the_broken_chooser_is_caught():
    assert _passes_over_inexact_layouts(row_exact_layout)

    def own_block(weights, provider="cpu", threads=None, probe=None):  # deliberately broken
        return BLOCK_SIZES[weights], 1

    assert not _passes_over_inexact_layouts(own_block)
    never = lambda weights, block, multiple, threads: False  # noqa: E731
    assert row_exact_layout("int8", probe=never) == (BLOCK_SIZES["int8"], 1)

    def unasked(weights, block, multiple, threads):
        raise AssertionError("no probe for another provider's kernels")

    assert row_exact_layout("int8", "accelerator", probe=unasked) == (128, 1)
    assert row_exact_layout("int4", "accelerator", probe=unasked) == (32, 1)
    for bad in ("fp32", "int2"):
        with pytest.raises(ValueError, match="^weights:"):
            row_exact_layout(bad)


# ---------------------------------------------------------------------- Qwen3-TTS folders
@pytest.fixture(scope="module")
def qwen3_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_quant_cache")


@pytest.mark.parametrize("weights_kind", ["int8", "int4"])
def test_quantised_qwen3_folder_loads_and_speculation_is_exact(qwen3_cache, weights_kind):
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    tts = Qwen3TTS.load(QWEN3 / "custom_equal", cache_dir=qwen3_cache, weights=weights_kind)
    assert tts.weights == weights_kind
    # the code predictor in its row-exact block on this CPU (depth.int8.b64.onnx on AVX-512)
    assert tts.depth.graph.path.name.startswith(f"depth.{weights_kind}.")
    # the talker in a block whose lone rows are exact (talker.int8.b64.onnx on AVX-512)
    assert tts.talker.graph.path.name.startswith(f"talker.{weights_kind}.")
    ops = {n.op_type for n in onnx.load(str(tts.talker.graph.path)).graph.node}
    assert "MatMulNBits" in ops and "MatMul" not in ops
    kw = dict(speaker="aiden", language="english", temperature=0, max_frames=12)
    ar = tts.generate_codes("Hello there.", mode="ar", **kw)
    spec = tts.generate_codes("Hello there.", mode="spec", **kw)
    assert ar.frames > 0 and np.array_equal(ar.codes, spec.codes)


def test_quantised_logit_error_is_stated_and_int4_is_worse(qwen3_cache):
    from codecspec.families.qwen3_tts.quant_error import logit_error

    errs = {
        w: logit_error(QWEN3 / "custom_equal", w, texts=1, max_frames=8, cache_dir=qwen3_cache)
        for w in ("fp32", "int8", "int4")
    }
    assert errs["fp32"]["depth"]["max_abs"] == 0.0 and errs["fp32"]["talker"]["kl_mean"] == 0.0
    for stage in ("talker", "depth"):
        assert 0 < errs["int8"][stage]["max_abs"] < errs["int4"][stage]["max_abs"]
        assert errs["int8"][stage]["kl_mean"] < errs["int4"][stage]["kl_mean"]
    assert errs["int8"]["depth"]["top1_agreement"] >= errs["int4"]["depth"]["top1_agreement"]


def test_bad_weights_for_a_folder_fail_before_building(tmp_path):
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    with pytest.raises(ValueError, match="^weights:"):
        Qwen3TTS.load(QWEN3 / "custom_equal", cache_dir=tmp_path, weights="fp16")
    assert not any(tmp_path.iterdir())


def test_the_talker_block_is_its_own_where_rows_agree_else_the_first_unpadded_one():
    """The Qwen3 talker steps one row alone and several in the engine's batched call, and
    cannot pad a step: its block is the own one where lone rows are exact, else the first
    row-exact block with no padding (8 bits: 64 where 128 computes a lone row otherwise);
    a chooser that keeps 128 regardless is caught."""
    asked = []

    def lone_128_differs(weights, block, multiple, threads):
        asked.append((block, multiple))
        return block != 128 and multiple == 1

    assert row_exact_block("int8", probe=lone_128_differs) == 64
    assert asked == [(128, 1), (64, 1)]  # never a padded layout
    assert row_exact_block("int4", probe=lone_128_differs) == 32  # the own block holds
    always = lambda weights, block, multiple, threads: True  # noqa: E731
    assert row_exact_block("int8", probe=always) == BLOCK_SIZES["int8"]
    never = lambda weights, block, multiple, threads: False  # noqa: E731
    assert row_exact_block("int8", probe=never) == BLOCK_SIZES["int8"]  # engine: per stream
    assert row_exact_block("int8", "accelerator", probe=never) == BLOCK_SIZES["int8"]
    broken = lambda weights, provider="cpu", threads=None, probe=None: BLOCK_SIZES[weights]  # noqa: E731
    assert broken("int8", probe=lone_128_differs) != 64  # the check above can fail
    with pytest.raises(ValueError, match="^weights:"):
        row_exact_block("fp32")
