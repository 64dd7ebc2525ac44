"""Does a quantised MatMul compute a row the same way whatever else its call holds?

Speculation over quantised weights keeps the quantised model's law only if a tree node's
logits do not depend on the other nodes of its verify call. `MatMulNBits` quantises each
activation row on its own, so the law holds in exact arithmetic; whether it holds bit for bit
depends on which MLAS kernel the CPU dispatches to:

* on AVX-512 CPUs (and for 8 bits on AVX2) one kernel serves every row count: a row's output
  is the same bits alone or in a call (row-independent);
* on AVX2 without AVX-512, 4 bits take a one-row kernel for a call of one row and a tiled
  kernel plus a float GEMM of per-block activation sums (the zero-point term) for more rows.
  Both compute the same sum of the same quantised products in a different order, so a row
  differs by float rounding only.

`probe_rows(model)` measures which holds for every MatMulNBits node of a model on this
machine, and how large the difference is against a rounding bound derived from the kernel's
arithmetic (`rounding_bound`). A row-coupled quantiser (quantize_dynamic: one activation scale
per call) moves rows by whole quantisation steps and exceeds that bound.

`row_exact_layout` / `row_exact_block` pick, by that probe on one MatMul quantised as a graph
would be (`probe_weights`), the quantisation layout whose rows are the same bits on this CPU
(`graphs.quantize`'s module doc says why the block decides).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from codecspec.graphs.quantize import BLOCK_SIZES, check_weights, quantize_weights

__all__ = [
    "NBitsWeights",
    "ROW_EXACT_LAYOUTS",
    "RowProbe",
    "activation_half_steps",
    "cpu_simd_flags",
    "matmul_model",
    "nbits_node",
    "probe_rows",
    "probe_weights",
    "row_exact_block",
    "row_exact_layout",
    "rounding_bound",
    "together_and_alone",
]

# (block, row multiple) a verifying graph may take, fastest first (module doc). 8 bits: an
# unpadded 64 before a padded 128 (their MatMuls cost the same on AVX-512; padding adds a row
# to every AR call); 4 bits: the block decides (128 in pairs 0.73x the time of 32 alone).
ROW_EXACT_LAYOUTS = {
    "int8": ((128, 1), (64, 1), (128, 2), (64, 2), (32, 1), (32, 2)),
    "int4": ((128, 1), (128, 2), (64, 1), (64, 2), (32, 1), (32, 2)),
}
# float32 unit roundoff
_U = 2.0**-24
# Activations are quantised to int8 per row and block with scale = amax / 127.
_A_LEVELS = 127


@dataclass(frozen=True)
class NBitsWeights:
    """One MatMulNBits node's weights: stored codes q [K, N], per-block scales and zero
    points broadcast to [K, N] (w = (q - zero) * scale)."""

    q: np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    block_size: int

    def dequantized(self) -> np.ndarray:
        """The weights [K, N] the kernel multiplies by."""
        return (self.q - self.zero) * self.scale


def _unpack_codes(blob: np.ndarray, bits: int, K: int) -> np.ndarray:
    """Stored codes [K, N] from MatMulNBits' B [N, blocks, bytes] (low nibble first)."""
    N = blob.shape[0]
    flat = blob.reshape(N, -1).astype(np.int32)
    if bits == 4:
        flat = np.stack([flat & 0x0F, flat >> 4], axis=-1).reshape(N, -1)
    return flat[:, :K].T


def _zero_points(node_inputs, inits, bits: int, N: int, blocks: int) -> np.ndarray:
    """Zero points [N, blocks]; symmetric quantisation leaves them implicit (2^(bits-1))."""
    name = node_inputs[3] if len(node_inputs) > 3 else ""
    if not name:
        return np.full((N, blocks), 2 ** (bits - 1), np.int32)
    zp = numpy_helper.to_array(inits[name])
    if zp.dtype != np.uint8:  # zero points given as floats, one per block
        return zp.reshape(N, blocks)
    zp = zp.reshape(N, -1).astype(np.int32)
    if bits == 4:
        zp = np.stack([zp & 0x0F, zp >> 4], axis=-1).reshape(N, -1)
    return zp[:, :blocks]


def nbits_node(node: onnx.NodeProto, inits: dict) -> NBitsWeights:
    """The weights of a MatMulNBits node whose B, scales (and zero points) are initializers."""
    attr = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    K, N, bits, B = attr["K"], attr["N"], attr["bits"], attr["block_size"]
    blocks = -(-K // B)
    q = _unpack_codes(numpy_helper.to_array(inits[node.input[1]]), bits, K)
    scales = numpy_helper.to_array(inits[node.input[2]]).reshape(N, blocks)
    zeros = _zero_points(node.input, inits, bits, N, blocks)
    per_k = np.arange(K) // B  # the block of every input row
    return NBitsWeights(q, scales.T[per_k], zeros.T[per_k].astype(np.float64), B)


def activation_half_steps(x: np.ndarray, block_size: int) -> np.ndarray:
    """Half an int8 quantisation step of every activation [M, K]: the kernel quantises each
    row's block with scale amax / 127, so |x~ - x| is at most this."""
    x = np.asarray(x, np.float64)
    K = x.shape[1]
    blocks = -(-K // block_size)
    padded = np.pad(np.abs(x), ((0, 0), (0, blocks * block_size - K)))
    amax = padded.reshape(len(x), blocks, block_size).max(-1)
    return np.repeat(amax / (2 * _A_LEVELS), block_size, axis=1)[:, :K]


def rounding_bound(w: NBitsWeights, x: np.ndarray) -> np.ndarray:
    """Largest |together - alone| [M, N] two float orderings of the kernel's sum can give.

    Both MLAS paths sum exact int32 block dot products of stored codes and int8 activations,
    each scaled in float (at most 2 roundings, plus one for an activation block sum), across
    K / block_size blocks, then add the zero-point term: every term passes through at most
    n = blocks + 3 roundings, so each result is within gamma_n * S of the exact value
    (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), with S the sum of the
    magnitudes the kernel adds: S = sum_k scale_k (|q_k| + zero_k) |x~_k|, which covers the
    one-row path's |q_k - zero_k| too. x~ is x quantised per block; |x~_k| <= |x_k| + half an
    activation step. Two results of the same exact value differ by at most 2 gamma_n S."""
    x = np.asarray(x, np.float64)
    # scales may be negative (onnxruntime's symmetric quantiser maps amax to the code -8)
    mag = np.abs(w.scale) * (np.abs(w.q) + np.abs(w.zero))
    n = -(-w.q.shape[0] // w.block_size) + 3
    gamma = n * _U / (1 - n * _U)
    return 2 * gamma * ((np.abs(x) + activation_half_steps(x, w.block_size)) @ mag)


@dataclass(frozen=True)
class RowProbe:
    """What a quantised model's MatMuls keep of a row when other rows share its call.

    row_independent: every row of every call is the same bits as the row alone.
    max_abs: the largest |together - alone| over every node, call size and output.
    bound_ratio: the largest |together - alone| / rounding_bound (<= 1: float rounding).
    """

    weights: str
    nodes: int
    rows: tuple
    row_independent: bool
    max_abs: float
    bound_ratio: float

    @property
    def within_rounding(self) -> bool:
        return self.bound_ratio <= 1.0

    @property
    def holds(self) -> str:
        """ "bit-identical", "float-rounding" or "row-coupled" (the law is broken)."""
        if self.row_independent:
            return "bit-identical"
        return "float-rounding" if self.within_rounding else "row-coupled"

    def to_dict(self) -> dict:
        return {**asdict(self), "rows": list(self.rows), "holds": self.holds}


def _single_node_model(node: onnx.NodeProto, inits: dict, K: int) -> bytes:
    """`node` alone, its weights as initializers, one float input x [M, K]."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["M", K])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    weights = [inits[n] for n in node.input[1:] if n]
    copy = helper.make_node(
        node.op_type, ["x", *node.input[1:]], ["y"], domain=node.domain, name="probe"
    )
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph([copy], "row_probe", [x], [y], weights)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def together_and_alone(session, x: np.ndarray, rows: Sequence[int], row_multiple: int = 1) -> list:
    """[(together, alone)] for calls of the first r rows of x, each r in `rows`. "Alone" is
    each row in a call of its own, or with `row_multiple` > 1 in a call of that many rows
    (the row, then copies of row 0: a padded call, graphs.builder.set_row_multiple)."""
    m = int(row_multiple)
    fill = np.repeat(x[:1], m - 1, axis=0)
    alone = np.concatenate(
        [
            session.run(None, {"x": np.concatenate([x[i : i + 1], fill])})[0][:1]
            for i in range(max(rows))
        ]
    )
    return [(session.run(None, {"x": x[:r]})[0], alone[:r]) for r in rows]


def probe_rows(
    model: onnx.ModelProto,
    weights: str = "",
    *,
    rows: Sequence[int] = (2, 5, 17),
    seed: int = 0,
    provider: str = "cpu",
    threads: Optional[int] = None,
    row_multiple: int = 1,
) -> RowProbe:
    """Run every MatMulNBits node of `model` on its own over random activation rows, in calls
    of each size in `rows` and row by row, and compare (see the module doc). Call sizes: 2
    and 5 are small trees, 17 a large one (kernels tile rows by 4 and columns by 4 or 16).
    `row_multiple` m > 1: the law of a graph whose calls are padded to m rows, so "row by
    row" is each row in a call of m (give `rows` multiples of m)."""
    from codecspec.runtime.session import open_session

    inits = {t.name: t for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    if not nodes:
        raise ValueError("model: has no MatMulNBits node to probe")
    rng = np.random.default_rng(seed)
    same, max_abs, ratio = True, 0.0, 0.0
    for node in nodes:
        w = nbits_node(node, inits)
        K = w.q.shape[0]
        x = rng.standard_normal((max(rows), K)).astype(np.float32)
        session = open_session(_single_node_model(node, inits, K), provider, threads)
        for together, alone in together_and_alone(session, x, rows, row_multiple):
            diff = np.abs(together.astype(np.float64) - alone)
            same = same and bool(np.array_equal(together, alone))
            max_abs = max(max_abs, float(diff.max()))
            ratio = max(ratio, float((diff / rounding_bound(w, x[: len(diff)])).max()))
    return RowProbe(weights, len(nodes), tuple(rows), same, max_abs, ratio)


def matmul_model(W: np.ndarray) -> onnx.ModelProto:
    """A float graph y = x @ W with W [K, N] a constant initializer."""
    K, N = W.shape
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["M", K])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["M", N])
    init = numpy_helper.from_array(np.ascontiguousarray(W, np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "mm", [x], [y])
    graph.initializer.append(init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def probe_weights(
    weights: str,
    size: tuple = (1024, 1024),
    *,
    rows: Sequence[int] = (2, 5, 17),
    seed: int = 0,
    provider: str = "cpu",
    threads: Optional[int] = None,
    block_size: Optional[int] = None,
    row_multiple: int = 1,
) -> RowProbe:
    """`probe_rows` on one random [K, N] MatMul quantised to `weights` ("int8" | "int4"), in
    blocks of `block_size` input rows (None: the precision's own): which law a model quantised
    so keeps on this device (what calibration records)."""
    K, N = size
    W = np.random.default_rng(seed).standard_normal((K, N)) / np.sqrt(K)
    model = quantize_weights(matmul_model(W.astype(np.float32)), weights, block_size)
    return probe_rows(
        model,
        weights,
        rows=rows,
        seed=seed,
        provider=provider,
        threads=threads,
        row_multiple=row_multiple,
    )


def row_exact_layout(
    weights: str,
    provider: str = "cpu",
    threads: Optional[int] = None,
    probe: Optional[Callable[[str, int, int, Optional[int]], bool]] = None,
) -> tuple:
    """(block size, row multiple) for a graph whose rows must be the same bits alone and in a
    verify call: the first of `ROW_EXACT_LAYOUTS[weights]` for which `probe(weights, block,
    multiple, threads)` says so (default: `probe_weights` on one [512, 512] MatMul on this
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
    rows = (2, 4, 5, 17) if multiple == 1 else (2, 4, 6, 16)
    return probe_weights(
        weights,
        (512, 512),
        rows=rows,
        threads=threads,
        block_size=block_size,
        row_multiple=multiple,
    ).row_independent


# The flags MLAS dispatches its quantised GEMM kernels on.
_SIMD = ("avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "amx_int8")


def cpu_simd_flags() -> list:
    """Which of the SIMD extensions MLAS picks its kernels by this CPU has (Linux; [] where
    /proc/cpuinfo cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return []
    return [f for f in _SIMD if f in flags]


def _main() -> None:
    """`python -m codecspec.graphs.row_probe [K N ...]`: what this machine keeps, per size."""
    import sys

    dims = [int(a) for a in sys.argv[1:]] or [1024, 1024, 1024, 3072, 3072, 1024]
    print("SIMD:", " ".join(cpu_simd_flags()))
    for K, N in zip(dims[::2], dims[1::2]):
        for weights, layouts in ROW_EXACT_LAYOUTS.items():
            for block, m in layouts:
                rows = (2, 4, 5, 17) if m == 1 else (2, 4, 6, 16)
                p = probe_weights(
                    weights, (K, N), rows=rows, threads=1, block_size=block, row_multiple=m
                )
                print(
                    f"{weights} [{K}, {N}] blocks of {block}, calls of {list(p.rows)} rows "
                    f"against {'a row alone' if m == 1 else f'a row in a call of {m}'}: "
                    f"{p.holds}; max |together - alone| {p.max_abs:.2g}, "
                    f"{p.bound_ratio:.3g} of the bound"
                )


if __name__ == "__main__":
    _main()
