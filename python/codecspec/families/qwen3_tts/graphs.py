"""ONNX graphs and tables of a Qwen3-TTS checkpoint, built from its safetensors without torch.

Built once per checkpoint content into <cache>/qwen3/<content hash>/ (default cache:
$CODECSPEC_CACHE_DIR or ~/.cache/codecspec), written into a temporary sibling folder and renamed
into place only when complete, so an error or an interrupt leaves nothing half-built:

  talker.onnx         the talker's 28 (config: num_hidden_layers) Qwen3 decoder layers over a
                      host-owned KV cache (the depth-graph builder's "cpu" variant, or
                      "plain" where the head size is not a multiple of 8, see graph_variant;
                      heads="hidden": input_embeds in, final-norm hidden + new K/V rows out);
                      the talker's multimodal RoPE is plain 1-D RoPE for TTS input, where the
                      three position streams are equal (get_rope_index on an all-ones mask)
  text_proj.onnx      text projection: fc2(silu(fc1(x) + b1)) + b2 over text-embedding rows
  depth.onnx          the code predictor (predictor_import's importer) with its 15 LM heads in
                      the graph (heads="grouped": a call reads only the heads it uses) and
                      attention="placed_op" (a tree node computed as its AR step, bit for
                      bit, by codecspec's attention operator; "placed" in standard operators
                      where the build serves none, or on the plain variant)
  depth.heads.npy     the heads again, float32, for offset training (calibrate)
  codec_embedding.npy the talker's codec table [V, H] (c0, tags, speakers)
  code_embedding.npy  the predictor's 15 tables [G-1, V_code, H] (the next talker input sums
                      them with the c0 row)
  codec_head.npy      the talker's codec head [V, H]
  speaker_encoder.npz Base checkpoints: the speaker encoder's tensors (run in numpy)
  meta.json           what was built, from what
Text-embedding rows are read from the checkpoint per request (the table is 151936 x 2048).

Weight-only quantised variants (`--weights int8|int4`, graphs.quantize) are derived from the
float32 graphs on first use, in the same entry and just as atomically: talker.int8.onnx,
depth.int8.onnx (heads included), and their int4 twins; depth.int8.b64.onnx or
depth.int4.b128.m2.onnx instead where another layout is this CPU's fastest row-exact one (64:
8-bit blocks of 128 are not row-exact; b128.m2: 4-bit blocks of 128 with every call padded to
an even number of rows; `row_probe.row_exact_layout`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from codecspec.cache import cache_root

from .checkpoint import CACHE_FORMAT, Qwen3Checkpoint, TalkerSpec

__all__ = [
    "build_or_load",
    "talker_depth_config",
    "weights_graph",
    "FILES",
    "QUANTISED_STAGES",
    "CANDIDATES",
    "PRECISION_FILE",
    "chosen_precision",
]

FILES = (
    "talker.onnx",
    "text_proj.onnx",
    "depth.onnx",
    "depth.heads.npy",
    "codec_embedding.npy",
    "code_embedding.npy",
    "codec_head.npy",
    "meta.json",
)
_T = "talker."
SPEAKER_FILE = "speaker_encoder.npz"  # Base checkpoints: the x-vector encoder's tensors
# Talker positions the graph's RoPE cache covers at most (prompt + frames); the official
# config allows 32768, far more than one request of this runtime needs.
MAX_TALKER_POSITIONS = 8192


def talker_depth_config(spec: TalkerSpec):
    """The talker as a DepthDecoderConfig with trivial tables: every input goes through
    input_embeds and the (all-zero) input table contributes nothing."""
    from codecspec.graphs.config import DepthDecoderConfig

    return DepthDecoderConfig(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        rms_norm_eps=spec.rms_norm_eps,
        rope_theta=spec.rope_theta,
        num_codebooks=2,
        codebook_size=1,
        c0_vocab_size=1,
        num_draft_offsets=1,
        max_positions=min(spec.max_positions, MAX_TALKER_POSITIONS),
    )


def graph_variant(head_dim: int) -> str:
    """The builder variant for a model with this head size: onnxruntime's GroupQueryAttention
    (variant "cpu") only takes head sizes that are multiples of 8 and fails at run time on
    others, so those get the standard-ops graph (variant "plain"), same I/O and results."""
    return "cpu" if head_dim % 8 == 0 else "plain"


def _talker_weights(ck, spec: TalkerSpec, cfg):
    from codecspec.graphs.weights import DepthDecoderWeights, expected_shapes

    from .predictor_import import LAYER_MAP

    shapes = expected_shapes(cfg)
    w = DepthDecoderWeights()
    for i in range(spec.num_layers):
        for ours, theirs in LAYER_MAP.items():
            name = f"layers.{i}.{ours}"
            w[name] = ck.get(f"{_T}model.layers.{i}.{theirs}", shapes[name])
    w["final_norm"] = ck.get(f"{_T}model.norm.weight", shapes["final_norm"])
    H = spec.hidden_size
    w["c0_embedding"] = np.zeros((1, H), np.float32)
    w["code_embeddings"] = np.zeros((1, 1, H), np.float32)
    w["heads"] = np.zeros((1, 1, H), np.float32)
    w["draft_offsets"] = np.zeros((1, H), np.float32)
    return w


def _text_proj_graph(ck, spec: TalkerSpec) -> onnx.ModelProto:
    """Qwen3TTSTalkerResizeMLP(text_hidden, text_hidden, hidden, silu, bias=True)."""
    Th, H = spec.text_hidden_size, spec.hidden_size
    p = f"{_T}text_projection."
    w1 = ck.get(p + "linear_fc1.weight", (Th, Th))
    b1 = ck.get(p + "linear_fc1.bias", (Th,))
    w2 = ck.get(p + "linear_fc2.weight", (H, Th))
    b2 = ck.get(p + "linear_fc2.bias", (H,))
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(w1.T), "w1"),
        numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(np.ascontiguousarray(w2.T), "w2"),
        numpy_helper.from_array(b2, "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["text_embeds", "w1"], ["h1"]),
        helper.make_node("Add", ["h1", "b1"], ["h1b"]),
        helper.make_node("Sigmoid", ["h1b"], ["sig"]),
        helper.make_node("Mul", ["h1b", "sig"], ["act"]),
        helper.make_node("MatMul", ["act", "w2"], ["h2"]),
        helper.make_node("Add", ["h2", "b2"], ["projected"]),
    ]
    g = helper.make_graph(
        nodes,
        "qwen3_text_projection",
        [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["n", Th])],
        [helper.make_tensor_value_info("projected", TensorProto.FLOAT, ["n", H])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _placed(dcfg) -> str:
    """The code predictor's attention: "placed", so that a verify call scores each tree node
    with the AR call's arithmetic and speculation keeps the AR law bit for bit over quantised
    weights too; as codecspec's own operator ("placed_op", ~75 fewer nodes per call: 12%
    faster int4 calls on the 2-core AVX2 machine) where this build serves it."""
    from codecspec.runtime import custom_ops

    cpu = graph_variant(dcfg.head_dim) == "cpu"
    return "placed_op" if cpu and custom_ops.available() else "placed"


def _build_into(ck: Qwen3Checkpoint, out: Path, key: str, log) -> None:
    from codecspec.graphs.builder import build_depth_graph, cpu_variant_supported, save_model

    from .predictor_import import load_qwen3_tts_checkpoint

    if not cpu_variant_supported():
        raise ValueError(
            "model: the installed onnxruntime lacks the contrib ops the Qwen3-TTS talker "
            "graph uses (GroupQueryAttention, RotaryEmbedding); install onnxruntime >= 1.20"
        )
    spec = ck.spec
    t0 = time.perf_counter()
    tensors = ck.tensors()
    try:
        cfg = talker_depth_config(spec)
        variant = graph_variant(cfg.head_dim)
        # attention="in_place": a step writes its keys into the cache and attends over the
        # filled rows only; a cache of capacity C otherwise cost two copies of all C rows and
        # attention over them (masked) on every step.
        model = build_depth_graph(
            cfg,
            _talker_weights(tensors, spec, cfg),
            variant=variant,
            heads="hidden",
            attention="in_place" if variant == "cpu" else "call",
        )
        save_model(model, out / "talker.onnx")
        del model
        log(f"talker graph: {spec.num_layers} layers ({time.perf_counter() - t0:.1f} s)")
        save_model(_text_proj_graph(tensors, spec), out / "text_proj.onnx")
        V, H = spec.vocab_size, spec.hidden_size
        np.save(
            out / "codec_embedding.npy", tensors.get(f"{_T}model.codec_embedding.weight", (V, H))
        )
        np.save(out / "codec_head.npy", tensors.get(f"{_T}codec_head.weight", (V, H)))
        tensors.get(
            f"{_T}model.text_embedding.weight", (spec.text_vocab_size, spec.text_hidden_size)
        )
    finally:
        tensors.close()
    try:
        dcfg, dw = load_qwen3_tts_checkpoint(ck.dir)
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"model: {e}") from None
    if dcfg.num_codebooks != spec.num_code_groups:
        raise ValueError("model: config.json: talker and code predictor num_code_groups differ")
    depth = build_depth_graph(
        dcfg, dw, variant=graph_variant(dcfg.head_dim), heads="grouped", attention=_placed(dcfg)
    )
    save_model(depth, out / "depth.onnx")
    np.save(out / "depth.heads.npy", np.asarray(dw["heads"], np.float32))
    np.save(out / "code_embedding.npy", np.asarray(dw["code_embeddings"], np.float32))
    if ck.model_type == "base":
        tensors = ck.tensors()
        try:
            names = [n for n in tensors._where if n.startswith("speaker_encoder.")]
            if not names:
                raise ValueError("model: a Base checkpoint without speaker_encoder.* tensors")
            np.savez(out / SPEAKER_FILE, **{n: tensors.get(n) for n in names})
        finally:
            tensors.close()
    meta = {
        "format": CACHE_FORMAT,
        "content_hash": key,
        "checkpoint": str(ck.dir.resolve()),
        "talker_max_positions": cfg.max_positions,
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    log(f"all graphs built in {meta['build_seconds']} s")


def cache_entry(ck: Qwen3Checkpoint, cache_dir=None) -> Path:
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    return root / "qwen3" / ck.content_hash(memo=root / "qwen3" / "hashes.json")


def build_or_load(ck: Qwen3Checkpoint, cache_dir=None, rebuild: bool = False, log=None) -> Path:
    """The folder of built graphs for `ck`, building it first when absent (atomically)."""
    log = log or (lambda msg: None)
    entry = cache_entry(ck, cache_dir)
    if rebuild and entry.is_dir():
        shutil.rmtree(entry)
    want = FILES + ((SPEAKER_FILE,) if ck.model_type == "base" else ())
    if entry.is_dir() and all((entry / f).is_file() for f in want):
        return entry
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    except OSError as e:
        raise ValueError(
            f"cache_dir: cannot build graphs in {entry.parent} ({e.strerror}); "
            "set --cache-dir or $CODECSPEC_CACHE to a writable folder"
        ) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would hide a shared cache from others
    try:
        _build_into(ck, tmp, entry.name, log)
        if entry.exists():  # incomplete leftovers of an older codecspec: replace them
            shutil.rmtree(entry)
        os.replace(tmp, entry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entry


def text_embedding_rows(ck: Qwen3Checkpoint, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` of the talker's text-embedding table, read from the checkpoint (float32)."""
    from codecspec.graphs.safetensors_io import SafetensorsFile

    name = f"{_T}model.text_embedding.weight"
    tensors = ck.tensors()
    try:
        path = tensors._where.get(name)
        if path is None:
            raise ValueError(f"model: checkpoint has no tensor {name!r}")
    finally:
        tensors.close()
    f = SafetensorsFile(path)
    try:
        return f.rows(name, np.asarray(ids, np.int64))
    finally:
        f.close()


# Graphs that get weight-only quantised variants (text_proj runs once per request: fp32).
QUANTISED_STAGES = ("talker", "depth")
# The precisions `codecspec calibrate` measures (precision.py), and the file in an entry that
# holds its choice, read by `--weights auto`.
CANDIDATES = ("fp32", "int8", "int4")
PRECISION_FILE = "precision.json"


def chosen_precision(entry: Path) -> Optional[dict]:
    """The stored precision choice ({"chosen", "reason", ...}) of a built entry, or None."""
    f = Path(entry) / PRECISION_FILE
    if not f.is_file():
        return None
    doc = json.loads(f.read_text())
    if doc.get("chosen") not in CANDIDATES:
        raise ValueError(f"weights: {f} holds no valid choice; rerun `codecspec calibrate`")
    return doc


def weights_graph(
    entry: Path,
    stage: str,
    weights: str,
    log=None,
    block_size: Optional[int] = None,
    row_multiple: int = 1,
) -> Path:
    """The graph of `stage` ("talker" | "depth") at `weights` precision in a built entry,
    quantising the float32 graph into `<stage>.<weights>.onnx` first when absent; in blocks of
    `block_size` input rows where that is not the precision's own (`<stage>.<weights>.b<N>.onnx`)
    and with calls padded to `row_multiple` rows where that is not 1 (`...b<N>.m<M>.onnx`): the
    code predictor's row-exact layout on this device, `row_probe.row_exact_layout`."""
    from codecspec.graphs.builder import save_model, set_row_multiple
    from codecspec.graphs.quantize import BLOCK_SIZES, check_weights, quantize_weights
    from codecspec.runtime.depth_graph import heads_sidecar

    check_weights(weights)
    if stage not in QUANTISED_STAGES:
        raise ValueError(f"stage: must be one of {QUANTISED_STAGES}, got {stage!r}")
    src = entry / f"{stage}.onnx"
    if weights == "fp32":
        return src
    own = block_size in (None, BLOCK_SIZES[weights])
    name = f"{stage}.{weights}" + ("" if own else f".b{block_size}")
    dst = entry / (name + ("" if row_multiple == 1 else f".m{row_multiple}") + ".onnx")
    if dst.is_file():
        return dst
    t0 = time.perf_counter()
    model = quantize_weights(onnx.load(str(src)), weights, block_size)
    if row_multiple != 1:
        set_row_multiple(model, row_multiple)
    # Weights in a .data file beside the graph: onnxruntime then keeps no second copy of
    # them inside the model proto (-116 MB resident for the 0.6B talker). Written under a
    # temporary folder and moved into place data first, so a reader never sees half a pair.
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=entry))
    try:
        save_model(model, tmp / dst.name, external_data=True)
        os.replace(tmp / f"{dst.name}.data", entry / f"{dst.name}.data")
        os.replace(tmp / dst.name, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if stage == "depth":  # offset training reads the heads from the sidecar beside the graph
        _link_or_copy(entry / "depth.heads.npy", heads_sidecar(dst))
    if log:
        blocks = ("" if own else f", blocks of {block_size}") + (
            "" if row_multiple == 1 else f", calls padded to {row_multiple} rows"
        )
        log(f"{stage} graph quantised to {weights}{blocks} ({time.perf_counter() - t0:.1f} s)")
    return dst


def _link_or_copy(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
