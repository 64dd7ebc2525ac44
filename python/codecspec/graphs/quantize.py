"""Weight-only quantisation of built graphs with onnxruntime's own quantiser.

`quantize_weights(model, "int8" | "int4")` rewrites every MatMul whose weight is a constant
initializer into onnxruntime's MatMulNBits (8 or 4 bits per weight, symmetric, one scale per
block of input rows: 128 at 8 bits, 32 at 4 bits) through
`onnxruntime.quantization.matmul_nbits_quantizer`; everything else (embedding tables, norms,
attention) stays float32.

Why the block sizes differ: MLAS's int8-compute kernel pays per block (a scale multiply and a
float accumulate per block of int dot products), so at 8 bits a block of 128 made the Qwen3-TTS
0.6B code-predictor call 15% faster than 32 (3.9 -> 3.3 ms, AVX2 EPYC, interleaved) and the
talker step 12% (27.0 -> 23.8 ms), while the logits moved little more (mean KL against fp32
0.32 -> 0.39 on a random-weight folder; int4 at 32: 3.7). At 4 bits the larger block bought
0-6% and costs more accuracy (a 4-bit step is 16x an 8-bit one), so int4 keeps 32.

Why MatMulNBits with accuracy_level 4 and not `quantize_dynamic` (MatMulInteger): dynamic
quantisation scales the activations of a whole call with one number, so in a verify call a
node's logits would depend on the other nodes of the tree, and the speculative law would
differ from the autoregressive one. MatMulNBits quantises each activation row on its own
(accuracy_level 4: int8 compute, per row and block), so row i of a call with Q rows is the
same row computed alone: bit for bit where the CPU's kernel treats every call size alike
(AVX-512; 8 bits on AVX2), within the float rounding of the row's sum where it does not
(4 bits on AVX2). `graphs.row_probe` measures which holds on a machine; calibration records
it. accuracy_level 0 (float compute over dequantised weights) is row-exact too but ~50x
slower on this CPU for 8 bits.

Which kernel serves a call depends on the block size as well: on an AVX-512 (VNNI) EPYC, 8-bit
blocks of 128 and 4-bit blocks of 64 and 128 take one path for a row alone and another for
rows in pairs (a call of an odd number of rows computes its last row alone); rows then agree to
float rounding (~1% of the bound), while 8-bit blocks of 64 and 32 and 4-bit blocks of 32 give
the same bits in every call (2026-12-04). Those larger blocks are also the fast ones: 4-bit in
128 is 0.7x the MatMul time of 32 there. A graph that verifies trees (the code predictor) is
therefore quantised in `row_exact_layout`: the fastest (block, row multiple) whose rows are the
same bits on this device, found by a probe; a row multiple of 2 means every call of the graph
runs an even number of rows (the runtime pads; graphs.builder.set_row_multiple), so that no row
is ever computed alone.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable, Optional, Union

import onnx

__all__ = [
    "WEIGHTS",
    "BLOCK_SIZES",
    "ROW_EXACT_LAYOUTS",
    "check_weights",
    "default_weights",
    "quantize_weights",
    "row_exact_block",
    "row_exact_layout",
]

WEIGHTS = ("fp32", "int8", "int4")
BLOCK_SIZES = {"int8": 128, "int4": 32}  # input rows per scale (module doc)
# (block, row multiple) a verifying graph may take, fastest first (module doc). 8 bits: an
# unpadded 64 before a padded 128 (their MatMuls cost the same on AVX-512; padding adds a row
# to every AR call); 4 bits: the block decides (128 in pairs 0.73x the time of 32 alone).
ROW_EXACT_LAYOUTS = {
    "int8": ((128, 1), (64, 1), (128, 2), (64, 2), (32, 1), (32, 2)),
    "int4": ((128, 1), (128, 2), (64, 1), (64, 2), (32, 1), (32, 2)),
}
_BITS = {"int8": 8, "int4": 4}


def check_weights(weights: str) -> str:
    if weights not in WEIGHTS:
        raise ValueError(f"weights: must be one of {WEIGHTS}, got {weights!r}")
    return weights


def default_weights(provider: str) -> str:
    """fp32 on every provider: the checkpoint's own numbers (bf16 files widened exactly, as
    the official loader does), so greedy codes are the official code's. int8 / int4 read a
    quarter / an eighth of the bytes but are other models: their codes differ (a near tie in
    an argmax moves, and the utterance follows other codes from there), so they are asked for
    (`--weights`), never assumed. `provider` is kept for a provider that cannot run fp32."""
    del provider
    return "fp32"


def quantize_weights(
    model: Union[onnx.ModelProto, str], weights: str, block_size: Optional[int] = None
) -> onnx.ModelProto:
    """A copy of `model` with its constant-weight MatMuls as MatMulNBits (see module doc);
    `block_size` None: the precision's own (BLOCK_SIZES)."""
    check_weights(weights)
    if isinstance(model, str):
        model = onnx.load(model)
    if weights == "fp32":
        return model
    try:
        from onnxruntime.quantization import matmul_nbits_quantizer as mq
    except ImportError as e:  # onnx_ir: the quantiser's own dependency
        raise ValueError(
            f"weights: {weights} needs onnxruntime's quantiser and its dependency onnx_ir "
            f"(pip install 'codecspec[qwen3]'): {e}"
        ) from None
    if block_size is None:
        block_size = BLOCK_SIZES[weights]
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 16:
        raise ValueError(f"block_size: expected an int >= 16, got {block_size!r}")
    if block_size & (block_size - 1):
        raise ValueError(f"block_size: must be a power of two, got {block_size}")
    cfg = mq.DefaultWeightOnlyQuantConfig(
        block_size=block_size, is_symmetric=True, accuracy_level=4, bits=_BITS[weights]
    )
    # The quantiser logs one INFO line per MatMul; keep a user's console quiet.
    log = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = log.level
    log.setLevel(logging.WARNING)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the quantiser rewrites the model it is given in place
    try:
        q = mq.MatMulNBitsQuantizer(copy, algo_config=cfg)
        q.process()
    finally:
        log.setLevel(level)
    return q.model.model


def row_exact_layout(
    weights: str,
    provider: str = "cpu",
    threads: Optional[int] = None,
    probe: Optional[Callable[[str, int, int, Optional[int]], bool]] = None,
) -> tuple:
    """(block size, row multiple) for a graph whose rows must be the same bits alone and in a
    verify call: the first of `ROW_EXACT_LAYOUTS[weights]` for which `probe(weights, block,
    multiple, threads)` says so (default: `graphs.row_probe` on one [512, 512] MatMul on this
    CPU, once per process), else (the precision's own block, 1) (its rows then agree to float
    rounding; calibration's tree-row probe records that and `auto` decodes AR). Other
    providers run other kernels that this probe cannot see: they keep (own block, 1)."""
    check_weights(weights)
    if weights == "fp32":
        raise ValueError("weights: fp32 graphs are not quantised in blocks")
    own = (BLOCK_SIZES[weights], 1)
    if provider != "cpu":
        return own
    probe = _rows_alike if probe is None else probe
    return next((lay for lay in ROW_EXACT_LAYOUTS[weights] if probe(weights, *lay, threads)), own)


def row_exact_block(
    weights: str,
    provider: str = "cpu",
    threads: Optional[int] = None,
    probe: Optional[Callable[[str, int, int, Optional[int]], bool]] = None,
) -> int:
    """The block size for a graph that runs a row alone and rows in calls of any size (the
    Qwen3 talker: one stream's step, and the serving engine's step of several streams at
    once), whose rows must be the same bits either way: the precision's own block where
    `probe` says its rows are (row multiple 1), else the first such block of
    `ROW_EXACT_LAYOUTS[weights]` (AVX-512: 8 bits in 64, where 128 computes a lone row by
    another kernel), else the own block (its rows then differ, and the engine steps each
    stream alone). No padding: a one-row step cannot pad to two rows without changing its
    attention. Other providers keep the own block (the probe sees the CPU's kernels only)."""
    check_weights(weights)
    if weights == "fp32":
        raise ValueError("weights: fp32 graphs are not quantised in blocks")
    own = BLOCK_SIZES[weights]
    if provider != "cpu":
        return own
    probe = _rows_alike if probe is None else probe
    blocks = [own] + [b for b, m in ROW_EXACT_LAYOUTS[weights] if m == 1 and b != own]
    return next((b for b in blocks if probe(weights, b, 1, threads)), own)


@functools.cache
def _rows_alike(weights: str, block_size: int, multiple: int, threads: Optional[int]) -> bool:
    """Whether MatMulNBits rows in blocks of `block_size` are the same bits in calls of any
    size (`multiple` 1: 2 to 17 rows against the row alone) or of any even size (`multiple` 2:
    2 to 16 rows against the row in a pair) on this CPU; cached for the process, whose kernels
    do not change. A [512, 512] MatMul gives the verdicts of the code predictor's own shapes
    (AVX-512 EPYC: [256, 256] to [3072, 1024] alike) in ~0.03 s a layout, after the
    quantiser's import."""
    from codecspec.graphs.row_probe import probe_weights

    rows = (2, 4, 5, 17) if multiple == 1 else (2, 4, 6, 16)
    return probe_weights(
        weights,
        (512, 512),
        rows=rows,
        threads=threads,
        block_size=block_size,
        row_multiple=multiple,
    ).row_independent
