"""Does a verify call score a position as the AR call does, on this device, at these weights?

Speculation keeps the AR law only if a tree node's logits are the AR step's logits for the
same position. Quantised weights make "almost" not enough: MatMulNBits quantises each
activation row to int8, so a 1e-7 difference in a row's input can become whole quantisation
steps. With onnxruntime's fused GroupQueryAttention (a one-row and a several-row call summed
in other orders) a verified row of the 0.6B code predictor differed from its AR row by ~0.05
in int8/int4 and greedy codes parted within a frame (AVX-512 EPYC, 2026-12-03); the code
predictor is therefore built with attention="placed" (graphs/placed_attention.py; as
codecspec's own operator, "placed_op", where the build serves it), whose rows
equal the AR rows bit for bit where the CPU's MatMul kernels compute a row alike in any call.
Where they do not (int4 on AVX2: a one-row kernel and a tiled one) rows agree to float
rounding only. `probe_tree_rows` measures it on frames of the checkpoint's own corpus: each
frame decoded AR, then speculatively with drafts set to the AR codes (every draft accepted,
so every level is scored by a verify call), the two logits of every level compared.
`codecspec calibrate --model DIR` lets `auto` speculate only where the difference stays at
float rounding.
"""

from __future__ import annotations

import numpy as np

import codecspec as cs

__all__ = ["ROUNDING", "probe_tree_rows"]

# A verified row agrees with its AR row "to float rounding" when they differ by at most this
# fraction of the row's largest logit (float32 rounding through the code predictor's layers
# measured ~1e-6 of it at 0.6B; int8 activation steps are ~1e-2 of it).
ROUNDING = 1e-5


def _ar_rows(dec, hidden, c0) -> tuple:
    """(codes, {level: logits}) of the AR decode of one frame (greedy)."""
    rows: dict = {}
    target = dec._target_row

    def keep(call, node, level):
        r = target(call, node, level)
        rows.setdefault(level, np.array(r, np.float32, copy=True))
        return r

    dec._target_row = keep
    try:
        codes = dec.decode_frame(hidden, c0, cs.Generator(0), "ar")
    finally:
        dec._target_row = target
    return codes, rows


def _on_truth(tree, n: int, tokens, heads, codes) -> np.ndarray:
    """Which of a call's n nodes hold the AR codes, themselves and every ancestor: only their
    rows score a position the AR run scored (a node off that path, a draft the tree holds at
    a rank the truth is not at, has another input)."""
    parents = np.asarray(tree.parents)
    on = np.zeros(n, bool)
    for i in range(n):  # canonical order: a parent comes before its children
        here = int(tokens[i]) == int(codes[int(heads[i])])
        on[i] = here and (parents[i] < 0 or on[parents[i]])
    return on


def _verified_rows(dec, hidden, c0, codes) -> dict:
    """{level: logits} of the verify calls of one frame decoded speculatively with every
    draft right (ControlledDrafts at acceptance 1 about the AR codes): each level's first row
    from a node on the AR codes' path (a call's root always is)."""
    from codecspec.decode.depth import ControlledDrafts

    rows: dict = {}
    verify, control = dec._verify, dec.draft_control

    def keep(call, tree, n, tokens, heads, g):
        on = _on_truth(tree, n, tokens, heads, codes)
        for i in np.flatnonzero(on):
            rows.setdefault(int(heads[i]), np.array(call.logits[i], np.float32, copy=True))
        return verify(call, tree, n, tokens, heads, g)

    drafts = ControlledDrafts(1.0, dec.V)
    drafts.truth = codes
    dec._verify, dec.draft_control = keep, drafts
    try:
        dec.decode_frame(hidden, c0, cs.Generator(0), "spec")
    finally:
        dec._verify, dec.draft_control = verify, control
    return rows


def probe_tree_rows(dec, hiddens, c0s, frames: int = 6) -> dict:
    """{"exact": verified rows equal the AR rows to float rounding (ROUNDING) on every level
    of the first `frames` frames; "bitwise": bit for bit; "max_abs_diff", "max_rel_diff";
    "frames"}. `dec`: a `DepthDecoder` over a heads-in-graph code predictor."""
    if not dec.graph.heads_in_graph:
        raise ValueError("dec: the probe reads the graph's own logits (a heads-in-graph decoder)")
    params = dec.params
    dec.params = cs.SamplingParams(0.0, 0, 1.0)  # greedy: the drafts know the frame's codes
    worst_abs = worst_rel = 0.0
    n = min(int(frames), len(c0s))
    try:
        for h, c0 in zip(hiddens[:n], c0s[:n]):
            codes, ar = _ar_rows(dec, h, int(c0))
            spec = _verified_rows(dec, h, int(c0), codes)
            for level, row in spec.items():
                d = float(np.abs(row - ar[level]).max())
                worst_abs = max(worst_abs, d)
                worst_rel = max(worst_rel, d / max(float(np.abs(ar[level]).max()), 1e-30))
    finally:
        dec.params = params
    return {
        "exact": worst_rel <= ROUNDING,
        "bitwise": worst_abs == 0.0,
        "max_abs_diff": worst_abs,
        "max_rel_diff": worst_rel,
        "frames": n,
    }
