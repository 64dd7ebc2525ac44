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
therefore quantised in `row_probe.row_exact_layout`: the fastest (block, row multiple) whose
rows are the same bits on this device, found by a probe; a row multiple of 2 means every call
of the graph runs an even number of rows (the runtime pads; graphs.builder.set_row_multiple),
so that no row is ever computed alone.
"""

from __future__ import annotations

import logging
from typing import Optional, Union

import onnx

__all__ = [
    "WEIGHTS",
    "BLOCK_SIZES",
    "check_weights",
    "default_weights",
    "quantize_weights",
]

WEIGHTS = ("fp32", "int8", "int4")
BLOCK_SIZES = {"int8": 128, "int4": 32}  # input rows per scale (module doc)
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
