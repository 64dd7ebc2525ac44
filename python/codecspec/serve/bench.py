"""Scaling figures: the in-process engine at n concurrent streams, and a load test against a
running server. Both report the same figures per n: aggregate real time (audio seconds
produced per wall second), per-stream real-time factor (wall seconds from submission to the
last frame / audio seconds) p50/p95 and time to first audio p50/p95."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

# Sentences of similar length (2-4 s of audio each), cycled over the streams.
TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding keeps the output law of the model.",
    "Many streams share one batch on a small machine.",
    "Every frame holds sixteen codes from two models.",
)


def _pct(x, q) -> float:
    return float(np.percentile(np.asarray(x, float), q)) if len(x) else float("nan")


def summarize(n: int, audio_s, latency_s, ttfa_s, wall_s: float) -> dict:
    """The per-n figures from per-request audio seconds, completion latencies and TTFAs."""
    rtf = np.asarray(latency_s, float) / np.maximum(np.asarray(audio_s, float), 1e-9)
    return {
        "n": n,
        "requests": len(audio_s),
        "audio_seconds": float(np.sum(audio_s)),
        "wall_seconds": wall_s,
        "aggregate_realtime": float(np.sum(audio_s)) / max(wall_s, 1e-9),
        "per_stream_rtf_p50": _pct(rtf, 50),
        "per_stream_rtf_p95": _pct(rtf, 95),
        "streams_faster_than_realtime": int((rtf < 1.0).sum()),
        "ttfa_ms_p50": 1e3 * _pct(ttfa_s, 50),
        "ttfa_ms_p95": 1e3 * _pct(ttfa_s, 95),
    }


# --------------------------------------------------------------------------- in-process
def engine_scaling(
    engine,
    ns,
    mode: str,
    seed: int = 0,
    progress: bool = True,
    texts=TEXTS,
    input_format: str = "text",
) -> list[dict]:
    """n streams submitted together, for each n in `ns`: the figures of `summarize`, plus
    frames/s and the frame stage's codes per call. TTFA here is the first decoded frame (no
    vocoder)."""
    from codecspec.serve.engine import SpeechRequest

    def req(i: int) -> SpeechRequest:
        text = texts[i % len(texts)]
        return SpeechRequest(text, input_format=input_format, mode=mode, seed=seed + i)

    list(engine.submit(req(0)))  # warm-up
    out = []
    for n in ns:
        c0 = engine.family.counters()
        reqs = [req(i) for i in range(n)]
        t0 = time.perf_counter()
        handles = engine.submit_many(reqs)
        for h in handles:
            for _ in h:
                pass
        wall = max(h.done_at for h in handles) - t0
        row = summarize(
            n,
            [h.count / engine.frame_rate for h in handles],  # FSQ: the stop head's length
            [h.done_at - h.submitted for h in handles],
            [h.first_frame_at - h.submitted for h in handles],
            wall,
        )
        c = {k: v - c0[k] for k, v in engine.family.counters().items()}
        row.update(mode=mode, model=engine.family.name, frames=sum(h.count for h in handles))
        row["frames_per_second"] = row["frames"] / max(wall, 1e-9)
        row["tokens_per_call"] = c["codes"] / max(c["lane_calls"], 1)
        row["batch_tokens_per_call"] = c["codes"] / max(c["calls"], 1)
        out.append(row)
        if progress:
            print(_line(row), flush=True)
    return out


def _line(r: dict) -> str:
    return (
        f"{r['mode']:>4} n={r['n']:>3}: {r['frames_per_second']:6.1f} frames/s, aggregate "
        f"{r['aggregate_realtime']:6.2f}x real time, "
        f"per-stream RTF p50 {r['per_stream_rtf_p50']:.2f} p95 {r['per_stream_rtf_p95']:.2f}, "
        f"TTFA p50 {r['ttfa_ms_p50']:.0f} ms p95 {r['ttfa_ms_p95']:.0f} ms"
    )


def table(rows: list[dict]) -> str:
    head = (
        "| mode | n | aggregate real time | per-stream RTF p50 | p95 | streams < 1 RTF "
        "| TTFA p50 ms | p95 ms | frames/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [
        f"| {r['mode']} | {r['n']} | {r['aggregate_realtime']:.2f}x | "
        f"{r['per_stream_rtf_p50']:.2f} | {r['per_stream_rtf_p95']:.2f} | "
        f"{r['streams_faster_than_realtime']} | {r['ttfa_ms_p50']:.0f} | {r['ttfa_ms_p95']:.0f} | "
        f"{r['frames_per_second']:.1f} |"
        for r in rows
    ]
    return "\n".join([head, *lines])


def plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in sorted({r["mode"] for r in rows}):
        rs = [r for r in rows if r["mode"] == mode]
        ns = [r["n"] for r in rs]
        a.plot(ns, [r["aggregate_realtime"] for r in rs], "o-", label=mode)
        b.plot(ns, [r["per_stream_rtf_p50"] for r in rs], "o-", label=f"{mode} p50")
        b.plot(ns, [r["per_stream_rtf_p95"] for r in rs], "x--", label=f"{mode} p95")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent streams")
        ax.legend()
        ax.grid(alpha=0.3)
    a.set_ylabel("aggregate real time (audio s / wall s)")
    b.set_ylabel("per-stream real-time factor")
    b.axhline(1.0, color="k", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- load test
@dataclass
class Result:
    status: int
    audio_s: float
    latency_s: float
    ttfa_s: float
    valid: bool
    error: Optional[str] = None
    stall_s: float = 0.0  # playback stalls of a client that plays from its first audio
    play_rtf: float = 0.0  # after the first audio: wall seconds / audio seconds


def playback(arrivals: list, bytes_per_second: float, header: int = 44) -> tuple:
    """(stall seconds, real-time factor after the first audio) of a client that starts
    playing at its first audio bytes: `arrivals` is [(seconds, bytes)] in order. A stall is
    time the player waits with nothing left to play (the stream fell behind real time)."""
    if not arrivals:
        return 0.0, 0.0
    t0 = arrivals[0][0]
    have = max(arrivals[0][1] - header, 0) / bytes_per_second  # audio seconds received
    stall = 0.0
    for t, n in arrivals[1:]:
        played = t - t0 - stall  # playback clock, paused while stalled
        if played > have:
            stall += played - have
        have += n / bytes_per_second
    first = max(arrivals[0][1] - header, 0) / bytes_per_second
    span = arrivals[-1][0] - t0
    return stall, span / max(have - first, 1e-9) if have > first else 0.0


def check_wav(body: bytes) -> tuple[bool, float]:
    """(header sizes agree with the bytes received, audio seconds) of a 16-bit mono WAV."""
    if len(body) < 44 or body[:4] != b"RIFF" or body[8:16] != b"WAVEfmt ":
        return False, 0.0
    (riff,) = struct.unpack("<I", body[4:8])
    (rate,) = struct.unpack("<I", body[24:28])
    (data,) = struct.unpack("<I", body[40:44])
    ok = riff == len(body) - 8 and data == len(body) - 44 and data % 2 == 0
    return ok, data / 2 / rate


def check_pcm(body: bytes, rate: int) -> tuple[bool, float]:
    """(whole 16-bit samples, audio seconds) of a raw pcm body at `rate` Hz."""
    return len(body) > 0 and len(body) % 2 == 0, len(body) / (2.0 * rate)


async def _one(client, url: str, payload: dict) -> Result:
    t0 = time.perf_counter()
    ttfa = None
    chunks, arrivals = [], []
    try:
        async with client.stream("POST", url, json=payload) as r:
            async for c in r.aiter_bytes():
                now = time.perf_counter()
                if ttfa is None and c:
                    ttfa = now - t0
                chunks.append(c)
                arrivals.append((now, len(c)))
            status = r.status_code
    except Exception as e:  # a lost response: recorded, not raised
        return Result(0, 0.0, time.perf_counter() - t0, 0.0, False, repr(e))
    body = b"".join(chunks)
    latency = time.perf_counter() - t0
    if status != 200:
        return Result(
            status, 0.0, latency, ttfa or latency, False, body[:200].decode(errors="replace")
        )
    if payload.get("response_format") == "pcm":  # OpenAI's: 24 kHz, no header
        from codecspec.serve.audio import OPENAI_RATE

        ok, audio = check_pcm(body, OPENAI_RATE)
        stall, play_rtf = playback(arrivals, 2.0 * OPENAI_RATE, header=0)
    else:
        ok, audio = check_wav(body)
        rate = struct.unpack("<I", body[24:28])[0] if ok else 16000
        stall, play_rtf = playback(arrivals, 2.0 * rate)
    return Result(status, audio, latency, ttfa or latency, ok, None, stall, play_rtf)


async def load_test(
    base_url: str,
    clients: int,
    requests: int,
    mode: str = "auto",
    texts=TEXTS,
    input_format: str = "text",
    timeout: float = 600.0,
    model: Optional[str] = None,
    response_format: str = "wav",
) -> dict:
    """`clients` concurrent clients, each sending `requests` requests one after another.
    Returns `summarize`'s figures plus counts of valid / lost / non-200 responses. `model`:
    the HTTP model name to send (default: none, i.e. whichever model the server loaded);
    `response_format`: "wav" or "pcm" (streamed as decoded even where the length is only
    known at the end, so the playback figures mean something for stop-head models)."""
    if response_format not in ("wav", "pcm"):
        raise ValueError(f"response_format: expected 'wav' or 'pcm', got {response_format!r}")
    import httpx

    url = base_url.rstrip("/") + "/v1/audio/speech"
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)

    async def client_loop(c: int, client) -> list[Result]:
        out = []
        for k in range(requests):
            payload = {
                "input": texts[(c + k) % len(texts)],
                "input_format": input_format,
                "response_format": response_format,
                "mode": mode,
                "seed": c * 1000 + k,
            }
            if model is not None:  # else the server's own model
                payload["model"] = model
            out.append(await _one(client, url, payload))
        return out

    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        t0 = time.perf_counter()
        res = await asyncio.gather(*(client_loop(c, client) for c in range(clients)))
        wall = time.perf_counter() - t0
    flat = [r for rs in res for r in rs]
    good = [r for r in flat if r.status == 200 and r.valid]
    row = summarize(
        clients,
        [r.audio_s for r in good],
        [r.latency_s for r in good],
        [r.ttfa_s for r in good],
        wall,
    )
    row.update(
        mode=mode,
        response_format=response_format,
        requests=len(flat),
        valid=len(good),
        lost=sum(r.status == 0 for r in flat),
        status_5xx=sum(r.status >= 500 for r in flat),
        status_4xx=sum(400 <= r.status < 500 for r in flat),
        errors=sorted({r.error for r in flat if r.error})[:5],
        # after their first audio: streams slower than real time, and playback stalls
        streams_slower_than_realtime_after_first_audio=sum(r.play_rtf > 1.0 for r in good),
        play_rtf_p50=_pct([r.play_rtf for r in good], 50),
        play_rtf_p95=_pct([r.play_rtf for r in good], 95),
        play_rtf_max=float(max([r.play_rtf for r in good], default=float("nan"))),
        streams_stalled=sum(r.stall_s > 0.0 for r in good),
        streams_stalled_over_100ms=sum(r.stall_s > 0.1 for r in good),
        stall_ms_p95=1e3 * _pct([r.stall_s for r in good], 95),
        stall_ms_max=1e3 * float(max([r.stall_s for r in good], default=float("nan"))),
    )
    return row
