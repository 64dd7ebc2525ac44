"""Load test of `codecspec serve --admit realtime` (docs/serving.md, "Admission").

    nice -n 10 python bench/serve_admission_loadtest.py --clients 64 --requests 2

Starts `codecspec serve` on 127.0.0.1 as a process with `--admit` (realtime by default),
`--max-streams` and `--max-queue` = the client count (nothing refused for room), runs
`codecspec.serve.bench.load_test` against it (WAV, one request after another per client),
reads the server's own deadline-miss counters from /metrics, stops the server with SIGTERM
and prints one JSON object. Bounded: the whole run stops after `--timeout` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--admit", default="realtime", choices=["realtime", "max"])
    ap.add_argument("--model", default="reference", help="what `codecspec serve` serves")
    ap.add_argument("--mode", default="auto", choices=["auto", "ar", "spec"])
    ap.add_argument(
        "--format",
        default="wav",
        choices=["wav", "pcm"],
        help="pcm streams as decoded (a stop-head model's WAV comes whole at the end)",
    )
    ap.add_argument("--vocoder-iters", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=1500.0)
    args = ap.parse_args()

    import httpx

    from codecspec.serve.bench import load_test

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    n = str(args.clients)
    cmd = [sys.executable, "-m", "codecspec.cli", "serve", "--port", str(port)]
    cmd += ["--model", args.model, "--admit", args.admit, "--max-streams", n, "--max-queue", n]
    cmd += ["--vocoder-iters", str(args.vocoder_iters)]
    server = subprocess.Popen(cmd, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        run = load_test(
            url,
            args.clients,
            args.requests,
            mode=args.mode,
            timeout=args.timeout,
            response_format=args.format,
        )
        row = asyncio.run(asyncio.wait_for(run, args.timeout))
        text = httpx.get(url + "/metrics", timeout=10).text
        row["server"] = {
            k: _metric(text, f"codecspec_{k}")
            for k in (
                "late_frames_total",
                "late_streams_total",
                "capacity",
                "streams_done_total",
                "streams_cancelled_total",
                "rejected_total",
            )
        }
        row["admit"] = args.admit
        row["command"] = " ".join(["codecspec", *cmd[3:]])
        print(json.dumps(row))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
