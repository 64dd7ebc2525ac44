"""Example client of the text-in WebSocket (`codecspec serve --model QWEN_DIR`,
/v1/audio/speech/stream-input; docs/serving.md): pipes a token stream into it and writes the
audio to a WAV as it comes, then prints the latency from the first text sent to the first
audio received, and the playback underruns (a chunk that came after the audio before it
had played out).

    my_llm | python bench/qwen3_text_socket_client.py --stdin -o answer.wav
    python bench/qwen3_text_socket_client.py --text "Hello there." --rate 30 -o out.wav

--text is sent word piece by word piece (about 4 characters each, an LLM token's size) at
--rate pieces a second; --stdin sends what standard input holds as it arrives. Needs the
`websockets` package.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time

import numpy as np


def pieces_of(text: str) -> list:
    """The text in LLM-token-sized pieces (a word, or 4 characters of a long one)."""
    words = re.findall(r"\s*\S+|\s+", text)
    return [w[i : i + 4] for w in words for i in range(0, len(w), 4)]


async def send_text(ws, args, sent: dict) -> None:
    if args.stdin:
        loop = asyncio.get_running_loop()
        while True:
            chunk = await loop.run_in_executor(None, os.read, sys.stdin.fileno(), 4096)
            if not chunk:
                break
            sent.setdefault("first", time.perf_counter())
            await ws.send(json.dumps({"text": chunk.decode("utf-8", "replace")}))
    else:
        t0 = time.perf_counter()
        for i, piece in enumerate(pieces_of(args.text)):
            await asyncio.sleep(max(0.0, t0 + i / args.rate - time.perf_counter()))
            sent.setdefault("first", time.perf_counter())
            await ws.send(json.dumps({"text": piece}))
    await ws.send(json.dumps({"end": True}))


async def run(args) -> dict:
    import websockets

    from codecspec.codec.audio import WavWriter

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    settings = {"voice": args.voice, "seed": args.seed, "output": "binary"}
    if args.language:
        settings["language"] = args.language
    async with websockets.connect(args.url, additional_headers=headers) as ws:
        await ws.send(json.dumps(settings))
        started = json.loads(await ws.recv())
        if started.get("type") != "session.started":
            raise SystemExit(f"refused: {started}")
        sent: dict = {}
        sender = asyncio.create_task(send_text(ws, args, sent))
        ready, sizes, done = [], [], None
        with WavWriter(args.output, started["sample_rate"], update_header=True) as wav:
            async for message in ws:
                if isinstance(message, bytes):
                    ready.append(time.perf_counter())
                    sizes.append(len(message) // 2)
                    wav.write(np.frombuffer(message, "<i2").astype("float32") / 32767.0)
                    continue
                m = json.loads(message)
                if m["type"] == "error":
                    print(f"error: {m['error']['message']}", file=sys.stderr)
                elif m["type"] == "utterance.done":
                    done = m
        await sender
    return report(sent.get("first"), ready, sizes, started["sample_rate"], done)


def report(first_text, ready: list, sizes: list, rate: int, done) -> dict:
    if not ready or first_text is None:
        return {"first_audio_ms": None, "utterance": done}
    played, late = 0, 0.0
    underruns = 0
    for t, n in zip(ready, sizes):
        due = ready[0] + played / rate
        if t > due:
            underruns, late = underruns + 1, max(late, t - due)
        played += n
    return {
        "first_audio_after_first_text_ms": round(1e3 * (ready[0] - first_text), 1),
        "audio_seconds": round(played / rate, 3),
        "chunks": len(ready),
        "underruns": underruns,
        "late_ms": round(1e3 * late, 1),
        "utterance": done,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="ws://127.0.0.1:8000/v1/audio/speech/stream-input")
    p.add_argument("--api-key", default=os.environ.get("CODECSPEC_API_KEY"))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="a text to send in token-sized pieces at --rate")
    src.add_argument("--stdin", action="store_true", help="send standard input as it arrives")
    p.add_argument("--rate", type=float, default=30.0, help="pieces a second (--text)")
    p.add_argument("--voice", default="alloy")
    p.add_argument("--language", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default="out.wav")
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(run(args))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
