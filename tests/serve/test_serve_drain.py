"""`codecspec serve` as a process: SIGTERM lets in-flight streams finish, then it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from serve_util import LONG, free_port, wait_for  # noqa: E402

import codecspec  # noqa: E402
from codecspec.serve.bench import check_wav  # noqa: E402


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_sigterm_drains_in_flight_streams():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The server process imports codecspec from where this test did (source tree or wheel).
    here = str(Path(codecspec.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    serve = ["serve", "--model", "reference", "--port", str(port)]
    cmd = [sys.executable, "-m", "codecspec.cli", *serve]
    proc = subprocess.Popen(cmd + ["--max-streams", "2", "--threads", "1"], env=env)
    try:
        assert wait_for(lambda: _up(url), timeout=120, every=0.2), "server did not come up"
        body = {"input": LONG, "input_format": "ipa", "seed": 1, "response_format": "wav"}
        with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as r:
            assert r.status_code == 200
            it = r.iter_bytes()
            chunks = [next(it)]
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            # Draining: the listening socket is closed, no new stream starts.
            assert not _up(url)
            chunks.extend(it)
        ok, seconds = check_wav(b"".join(chunks))
        assert ok and seconds > 2.0, "the in-flight stream was cut"
        # Uvicorn re-raises the captured SIGTERM once it has shut down cleanly.
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
