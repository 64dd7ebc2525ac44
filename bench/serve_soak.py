"""Soak test of `codecspec serve` (issue 51): a server under mixed load for a long time, its
resident memory, file descriptors and threads sampled as the requests go by.

    nice -n 10 python bench/serve_soak.py --minutes 30 --clients 8 -o soak.json
    python bench/serve_soak.py --minutes 1 --clients 4          # a short look

Starts `codecspec serve` (an API key set, `--max-queue` = the client count, so a valid request
is never refused for room) as a process and runs `--clients` clients until the time is up,
each request one of: a valid stream of a random length (1-4 sentences, pcm / wav / mp3) read
to the end; a stream whose client leaves after the first chunk; a bad request (a NUL or a lone
surrogate in `input`, a wrong type, an unknown field, a body over 64 KiB sent chunked); a
wrong or missing key. Every `--sample-every` seconds the server's VmRSS, open descriptors and
threads are read from /proc. At the end: SIGTERM (the drain), then one JSON object: the
counts, the samples, and the RSS slope after warm-up (least squares over the samples after the
first `--warmup` of the run, in MiB per 1,000 requests) against `--bound`. Exit status 1 when
the slope passes the bound, a valid request was lost (not 200, or its audio cut), a 5xx was
answered, or descriptors / threads grew after warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# espeak-ng's IPA for "Hello world. This is a test." (the serving tests' HELLO): no espeak-ng
# is needed for the valid requests, and their length is set by the repeat count
HELLO = "həlˈoʊ wˈɜːld | ðɪs ɪz ɐ tˈɛst"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_sample(pid: int) -> dict:
    """VmRSS (MiB), open descriptors and threads of process `pid` (Linux /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def slope_per_1000(samples: list, warmup: float) -> float:
    """Least-squares slope of RSS over requests answered, MiB per 1,000 requests, over the
    samples after the first `warmup` fraction of the run."""
    import numpy as np

    t_end = samples[-1]["t"]
    rest = [s for s in samples if s["t"] >= warmup * t_end]
    x = np.array([s["requests"] for s in rest], float)
    y = np.array([s["rss_mib"] for s in rest], float)
    if len(rest) < 3 or np.ptp(x) == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0] * 1000)


BAD_BODIES = [
    b'{"input": "Hi\\u0000 there, the rest of the sentence."}',
    b'{"input": "Hi \\ud800 there"}',
    b'{"input": 42}',
    b'{"input": "x", "speed": "fast"}',
    b'{"input": "x", "unknown": 1}',
    b'{"input": "x", ',
    b'{"input": "\xff"}',
]


class Soak:
    def __init__(self, url: str, key: str, deadline: float, seed: int):
        self.url, self.key, self.deadline = url, key, deadline
        self.rng = random.Random(seed)
        self.counts: dict = {}
        self.requests = 0
        self.lost: list = []

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.requests += 1

    def auth(self, right: bool = True) -> dict:
        return {"Authorization": f"Bearer {self.key if right else 'wrong-' + self.key}"}

    async def client(self, c) -> None:
        while time.monotonic() < self.deadline:
            kind = self.rng.choices(["valid", "leave", "bad", "wrong_key"], [6, 2, 2, 1])[0]
            try:
                await getattr(self, kind)(c)
            except Exception as e:  # a transport error is a finding, not the end of the run
                self.count(f"{kind}_{type(e).__name__}")
                if kind == "valid":
                    self.lost.append(f"{type(e).__name__}: {e}")

    async def valid(self, c) -> None:
        n = self.rng.randint(1, 4)
        fmt = self.rng.choice(["pcm", "wav", "mp3"])
        body = {"input": " | ".join([HELLO] * n), "input_format": "ipa", "response_format": fmt}
        body["seed"] = self.rng.randrange(2**31)
        url = self.url + "/v1/audio/speech"
        async with c.stream("POST", url, json=body, headers=self.auth()) as r:
            data = b"".join([chunk async for chunk in r.aiter_bytes()])
        self.count(f"valid_{r.status_code}")
        frames = r.headers.get("X-Codecspec-Frames")
        short = (
            fmt == "pcm" and frames is not None and len(data) < int(frames) * 0.08 * 48000 * 0.95
        )
        if r.status_code != 200 or not data or short:
            self.lost.append(f"{fmt} x{n}: status {r.status_code}, {len(data)} bytes")

    async def leave(self, c) -> None:
        body = {"input": " | ".join([HELLO] * 4), "input_format": "ipa", "response_format": "pcm"}
        async with c.stream(
            "POST", self.url + "/v1/audio/speech", json=body, headers=self.auth()
        ) as r:
            async for _ in r.aiter_bytes():
                break  # the client goes away after its first audio
        self.count(f"leave_{r.status_code}")

    async def bad(self, c) -> None:
        import httpx

        h = {**self.auth(), "content-type": "application/json"}
        if self.rng.random() < 0.2:

            async def big():
                for _ in range(40):
                    yield b"a" * 4096  # chunked, past 64 KiB

            try:
                r = await c.post(self.url + "/v1/audio/speech", content=big(), headers=h)
            except httpx.TransportError:  # the 413 came, and the connection closed, mid-upload
                self.count("bad_closed_mid_upload")
                return
        else:
            body = self.rng.choice(BAD_BODIES)
            r = await c.post(self.url + "/v1/audio/speech", content=body, headers=h)
        self.count(f"bad_{r.status_code}")

    async def wrong_key(self, c) -> None:
        h = self.auth(right=False) if self.rng.random() < 0.5 else {}
        r = await c.post(self.url + "/v1/audio/speech", json={"input": HELLO}, headers=h)
        self.count(f"key_{r.status_code}")


async def run(args, url: str, key: str, pid: int) -> dict:
    import httpx

    start = time.monotonic()
    soak = Soak(url, key, start + 60 * args.minutes, args.seed)
    samples = []

    async def sampler():
        while time.monotonic() < soak.deadline:
            samples.append(
                {"t": time.monotonic() - start, "requests": soak.requests, **proc_sample(pid)}
            )
            await asyncio.sleep(args.sample_every)

    limits = httpx.Limits(max_connections=args.clients + 4)
    async with httpx.AsyncClient(timeout=300, limits=limits) as c:
        await asyncio.gather(sampler(), *(soak.client(c) for _ in range(args.clients)))
        samples.append(
            {"t": time.monotonic() - start, "requests": soak.requests, **proc_sample(pid)}
        )
        metrics = (await c.get(url + "/metrics", headers=soak.auth())).text
    return {"soak": soak, "samples": samples, "metrics": metrics}


def report(args, out: dict) -> dict:
    soak, samples = out["soak"], out["samples"]
    after = [s for s in samples if s["t"] >= args.warmup * samples[-1]["t"]]
    slope = slope_per_1000(samples, args.warmup)
    five = sum(n for k, n in soak.counts.items() if k.split("_")[-1].startswith("5"))
    grew = {k: after[-1][k] - after[0][k] for k in ("fds", "threads") if after[-1][k] > after[0][k]}
    return {
        "minutes": args.minutes,
        "clients": args.clients,
        "env": args.env,
        "requests": soak.requests,
        "counts": dict(sorted(soak.counts.items())),
        "lost": soak.lost[:20],
        "responses_5xx": five,
        "rss_mib_first": samples[0]["rss_mib"],
        "rss_mib_after_warmup": after[0]["rss_mib"],
        "rss_mib_last": samples[-1]["rss_mib"],
        "rss_slope_mib_per_1000_requests": slope,
        "bound_mib_per_1000_requests": args.bound,
        "fds": [after[0]["fds"], after[-1]["fds"]],
        "threads": [after[0]["threads"], after[-1]["threads"]],
        "grew_after_warmup": grew,
        "ok": bool(slope < args.bound and not soak.lost and five == 0 and not grew),
        "samples": samples,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--model", default="reference", help="what `codecspec serve` serves")
    ap.add_argument("--max-streams", type=int, default=4)
    ap.add_argument("--vocoder-iters", type=int, default=8)
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=0.25, help="fraction of the run left out")
    ap.add_argument("--bound", type=float, default=2.0, help="MiB per 1,000 requests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        help="KEY=VALUE for the server, e.g. MALLOC_ARENA_MAX=2",
    )
    ap.add_argument("-o", "--output", type=Path, default=None, help="the JSON report")
    args = ap.parse_args()

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    key = secrets.token_hex(16)
    env = dict(os.environ, CODECSPEC_API_KEY=key, **dict(e.split("=", 1) for e in args.env))
    cmd = [sys.executable, "-m", "codecspec.cli", "serve", "--model", args.model]
    cmd += ["--port", str(port), "--max-streams", str(args.max_streams)]
    cmd += ["--max-queue", str(args.clients), "--threads", "1"]
    cmd += ["--vocoder-iters", str(args.vocoder_iters), "--admit", "max"]
    server = subprocess.Popen(cmd, env=env)
    try:
        import httpx

        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the server did not come up")
            time.sleep(0.2)
        out = asyncio.run(run(args, url, key, server.pid))
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    rep = report(args, out)
    text = json.dumps(rep)
    if args.output is not None:
        args.output.write_text(text + "\n")
    print(json.dumps({k: v for k, v in rep.items() if k != "samples"}))
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
