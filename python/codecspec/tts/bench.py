"""`codecspec bench`: the depth loop of the reference model, autoregressive vs speculative.

Both modes decode the same frames (h_t, c0 of held-out utterances, shipped as frames.npz) in
one run, interleaved frame by frame so that load drifting on a shared machine hits both alike;
per-frame wall times are summarised by their medians. The same run also times bare graph calls
(q = 1, the prefill, q = tree size) and predicts the ideal speed-up from them and the measured
rounds per frame: the gap between ideal and measured is what host work costs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.decode.depth import DepthDecoder
from codecspec.fidelity import per_position_pvalues

__all__ = ["load_frames", "bench_depth_loop"]


def load_frames(model_dir) -> tuple[np.ndarray, np.ndarray]:
    """(h_t float32 [N, H], c0 int64 [N]) shipped with a model folder."""
    path = Path(model_dir) / "frames.npz"
    if not path.is_file():
        raise FileNotFoundError(f"model_dir: no frames.npz in {model_dir}")
    with np.load(path, allow_pickle=False) as z:
        missing = {"hiddens", "c0s"} - set(z.files)
        if missing:
            raise ValueError(f"model_dir: {path} lacks arrays {sorted(missing)}")
        return z["hiddens"].astype(np.float32), z["c0s"].astype(np.int64)


def _interleaved(dec: DepthDecoder, hiddens, c0s, frames: int, seed: int, progress: bool):
    g = {"ar": cs.Generator(seed).fork(1), "spec": cs.Generator(seed).fork(2)}
    codes = {m: np.empty((frames, dec.G), np.int64) for m in g}
    times: dict = {m: [] for m in g}
    calls = {m: 0 for m in g}
    for m in g:  # warm-up outside the counts
        dec.decode_frame(hiddens[0], int(c0s[0]), g[m].copy(), m)
    it = range(frames)
    if progress:
        from codecspec.progress import bar

        it = bar(it, desc="bench ar+spec", total=frames)
    for i in it:
        j = i % len(c0s)
        for m in ("ar", "spec") if i % 2 == 0 else ("spec", "ar"):
            before = dec.stats.calls
            t0 = time.perf_counter()
            codes[m][i] = dec.decode_frame(hiddens[j], int(c0s[j]), g[m], m)
            times[m].append(1e3 * (time.perf_counter() - t0))
            calls[m] += dec.stats.calls - before
    return codes, times, calls


def _ideal_speedup(dec: DepthDecoder, spec_calls_per_frame: float, seed: int) -> dict:
    from codecspec.train.calibrate import measure_latency

    n = dec.tree.num_nodes
    lat = measure_latency(dec, [1, 2, n], repeats=20, host=False, seed=seed, progress=False)
    g1, gn = lat.graph(1), lat.graph(n)
    ar = lat.prefill_ms + (dec.G - 2) * g1
    spec = lat.prefill_ms + (spec_calls_per_frame - 1.0) * gn
    return {
        "graph_ms_q1": g1,
        f"graph_ms_q{n}": gn,
        "graph_ms_prefill": lat.prefill_ms,
        "ideal_speedup": ar / spec,
    }


def bench_depth_loop(
    model_dir,
    frames: int = 300,
    *,
    seed: int = 0,
    provider: str = "auto",
    threads: Optional[int] = None,
    progress: bool = True,
) -> dict:
    """AR vs speculative on the same frames; keys as documented for `codecspec bench`."""
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 2:
        raise ValueError(f"frames: expected an int >= 2, got {frames!r}")
    hiddens, c0s = load_frames(model_dir)
    dec = DepthDecoder.from_dir(model_dir, provider=provider, threads=threads)
    codes, times, calls = _interleaved(dec, hiddens, c0s, frames, seed, progress)
    ar_ms, spec_ms = (float(np.median(times[m])) for m in ("ar", "spec"))
    spec_cpf = calls["spec"] / frames
    p = per_position_pvalues(codes["ar"][:, 1:], codes["spec"][:, 1:], dec.V)
    out = {
        "frames": frames,
        "provider": dec.graph.provider,
        "tree_nodes": dec.tree.num_nodes,
        "ar_calls_per_frame": calls["ar"] / frames,
        "spec_calls_per_frame": spec_cpf,
        "tokens_per_call": (dec.G - 1) / spec_cpf,
        "ar_ms_per_frame": ar_ms,
        "spec_ms_per_frame": spec_ms,
        "ar_ms_per_frame_mean": float(np.mean(times["ar"])),
        "spec_ms_per_frame_mean": float(np.mean(times["spec"])),
        "speedup": ar_ms / spec_ms,
        "fidelity_min_p": float(p.min()),
        "fidelity_pvalues": [round(float(x), 4) for x in p],
    }
    out.update(_ideal_speedup(dec, spec_cpf, seed))
    out["efficiency"] = out["speedup"] / out["ideal_speedup"]
    return out
