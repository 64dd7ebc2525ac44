"""Timing a depth decoder, autoregressive against speculative, on the same frames.

`interleaved_ar_spec` decodes each frame in both modes, alternating which goes first, so that
load drifting on a shared machine hits both alike; `ideal_speedup` times the decoder's own
bound graph calls bare and predicts the speed-up if host work cost nothing. `codecspec bench`
(pipeline/depth_bench.py, the families' benches) and the speed-up map of calibration
(calibrate/speedup_map.py) both time with these, so they sit here, below both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import codecspec as cs
from codecspec.decode.depth import DepthDecoder
from codecspec.progress import bar

__all__ = ["Interleaved", "ideal_speedup", "interleaved_ar_spec"]


@dataclass
class Interleaved:
    """AR and speculative decoding of the same frames, per mode: codes, per-frame wall ms,
    graph calls, and the ms spent inside graph calls (the rest is host work)."""

    codes: dict
    times: dict
    calls: dict
    graph_ms: dict

    def median_ms(self, mode: str) -> float:
        return float(np.median(self.times[mode]))

    def host_share(self, mode: str) -> float:
        """Fraction of the frame time outside graph calls (sampling, heads, verify, commit)."""
        return 1.0 - float(np.sum(self.graph_ms[mode])) / float(np.sum(self.times[mode]))


def interleaved_ar_spec(
    dec: DepthDecoder, hiddens, c0s, frames: int, seed: int, progress: bool, before_frame=None
) -> Interleaved:
    """`before_frame(j)`, when given, runs before each decode of input frame j (untimed)."""
    g = {"ar": cs.Generator(seed).fork(1), "spec": cs.Generator(seed).fork(2)}
    run = Interleaved(
        {m: np.empty((frames, dec.G), np.int64) for m in g},
        {m: [] for m in g},
        {m: 0 for m in g},
        {m: [] for m in g},
    )
    for m in g:  # warm-up outside the counts
        dec.decode_frame(hiddens[0], int(c0s[0]), g[m].copy(), m)
    st = dec.stats
    for i in bar(range(frames), "bench ar+spec", frames, show=progress):
        j = i % len(c0s)
        for m in ("ar", "spec") if i % 2 == 0 else ("spec", "ar"):
            if before_frame is not None:
                before_frame(j)
            calls, graph_s = st.calls, st.graph_seconds
            t0 = time.perf_counter()
            run.codes[m][i] = dec.decode_frame(hiddens[j], int(c0s[j]), g[m], m)
            run.times[m].append(1e3 * (time.perf_counter() - t0))
            run.calls[m] += st.calls - calls
            run.graph_ms[m].append(1e3 * (st.graph_seconds - graph_s))
    return run


def _bare_call_ms(call, reps: int = 5) -> float:
    """Median ms of `reps` back-to-back runs of one bound call (the shape repeats, as the
    decode loop repeats it; inputs are whatever the last frame left in the buffers)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call.run()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def ideal_speedup(dec: DepthDecoder, spec_calls_per_frame: float, blocks: int = 20) -> dict:
    """Speed-up if host work cost nothing: bare graph calls of the decoder's own bound shapes
    (prefill, AR step, tree), timed in interleaved blocks, times the measured calls."""
    calls = {"prefill": dec._prefill_calls[True], "step": dec._step_call, "tree": dec._tree_call}
    ms: dict = {k: [] for k in calls}
    for _ in range(blocks):
        for k, call in calls.items():
            ms[k].append(_bare_call_ms(call))
    pre, g1, gn = (float(np.median(ms[k])) for k in ("prefill", "step", "tree"))
    ar = pre + (dec.G - 2) * g1
    spec = pre + (spec_calls_per_frame - 1.0) * gn
    return {
        "graph_ms_q1": g1,
        "graph_ms_tree": gn,
        "graph_ms_prefill": pre,
        "ideal_ar_ms_per_frame": ar,
        "ideal_spec_ms_per_frame": spec,
        "ideal_speedup": ar / spec,
    }
