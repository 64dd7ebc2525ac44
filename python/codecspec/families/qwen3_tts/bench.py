"""`codecspec bench --model QWEN3_DIR`: AR vs speculative depth loop inside the Qwen3-TTS
pipeline, same requests and seeds, modes alternating so that machine load hits both alike.

Reports per mode: frames, ms per frame of the talker and of the depth loop, depth calls per
frame and codes per call, and the depth loop's speed-up; and, at temperature 0, whether the
speculative codes equal the AR codes (they must: verification uses the AR warp).
"""

from __future__ import annotations

import numpy as np

from .calibrate import CALIBRATION_TEXTS, _request
from .pipeline import Qwen3TTS


def bench_qwen3(
    model_dir,
    *,
    texts: int = 4,
    max_frames: int = 200,
    cache_dir=None,
    provider: str = "cpu",
    threads=None,
    seed: int = 0,
    temperature=None,
    ref_audio=None,
) -> dict:
    tts = Qwen3TTS.load(model_dir, cache_dir=cache_dir, provider=provider, threads=threads)
    acc = {m: {"frames": 0, "talker": 0.0, "depth": 0.0, "calls": 0} for m in ("ar", "spec")}
    greedy_equal = True
    for i in range(int(texts)):
        text, lang = CALIBRATION_TEXTS[i % len(CALIBRATION_TEXTS)]
        kw = dict(max_frames=max_frames, seed=seed + i, temperature=temperature)
        kw.update(_request(tts, text, lang, i, ref_audio))
        codes = {}
        for mode in ("ar", "spec") if i % 2 == 0 else ("spec", "ar"):
            tts.depth.stats.reset()
            r = tts.generate_codes(text, mode=mode, **kw)
            a = acc[mode]
            a["frames"] += r.frames
            a["talker"] += r.seconds["talker"]
            a["depth"] += r.seconds["depth"]
            a["calls"] += tts.depth.stats.calls
            codes[mode] = r.codes
        if temperature == 0:
            greedy_equal &= bool(np.array_equal(codes["ar"], codes["spec"]))
    G = tts.spec.num_code_groups
    out: dict = {"model": str(tts.ck.dir), "texts": int(texts)}
    for mode, a in acc.items():
        n = max(a["frames"], 1)
        out[mode] = {
            "frames": a["frames"],
            "talker_ms_per_frame": 1e3 * a["talker"] / n,
            "depth_ms_per_frame": 1e3 * a["depth"] / n,
            "depth_calls_per_frame": a["calls"] / n,
            "depth_codes_per_call": (G - 1) * a["frames"] / max(a["calls"], 1),
        }
    out["depth_speedup"] = out["ar"]["depth_ms_per_frame"] / max(
        out["spec"]["depth_ms_per_frame"], 1e-9
    )
    if temperature == 0:
        out["greedy_spec_equals_ar"] = greedy_equal
    return out
