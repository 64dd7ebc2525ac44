"""Drain: on SIGTERM new requests and /health get 503 + Retry-After (the socket stays open)
while in-flight streams finish, then the server exits; in process (a stream held mid-way by
the fault hook, so the drain's window is the test's to close) and as a `codecspec serve`
process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


def _health(url: str):
    """/health's status, checked for Retry-After when 503; None when nothing answers."""
    try:
        r = httpx.get(url + "/health", timeout=5)
    except httpx.HTTPError:
        return None
    if r.status_code == 503:
        assert int(r.headers["Retry-After"]) >= 1 and r.json()["status"] == "draining"
    return r.status_code


def _assert_unavailable(r) -> None:
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) >= 1
    err = r.json()["error"]
    assert err["type"] == "server_error" and err["code"] == "unavailable", err


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
            # Draining (the stream has ~90 frames left to decode): the socket stays open,
            # /health and a new request are a 503 asking to retry later.
            assert wait_for(lambda: _health(url) == 503, timeout=60, every=0.05)
            r2 = httpx.post(url + "/v1/audio/speech", json=body, timeout=60)
            _assert_unavailable(r2)
            chunks.extend(it)
        ok, seconds = check_wav(b"".join(chunks))
        assert ok and seconds > 2.0, "the in-flight stream was cut"
        # Uvicorn re-raises the captured SIGTERM once it has shut down cleanly.
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


HOLD = 4242  # the seed of a stream the fault hook holds at frame 5 until the test lets go


def test_drain_answers_503_until_the_in_flight_stream_ends():
    import threading

    from codecspec.serve.app import create_app
    from codecspec.serve.commands import draining_server
    from codecspec.serve.engine import Engine

    release = threading.Event()

    def fault(req, t):  # runs in the engine's thread: the stream waits here, mid-way
        if req.seed == HOLD and t == 5:
            release.wait(timeout=120)

    app = create_app(lambda: Engine("reference", max_streams=2, threads=1, fault=fault))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = draining_server(app, 60.0, host="127.0.0.1", port=port, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: _health(url) == 200, timeout=120, every=0.05)
        body = {"input": LONG, "input_format": "ipa", "seed": HOLD, "response_format": "pcm"}
        with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as r:
            assert r.status_code == 200
            it = r.iter_bytes()
            chunks = [next(it)]  # the first chunk (3 frames): the stream is held at frame 5
            server.handle_exit(signal.SIGTERM, None)  # what uvicorn's signal handler calls
            assert wait_for(lambda: _health(url) == 503, timeout=30, every=0.02)
            for _ in range(3):  # as long as the stream is held, every request is told to wait
                _assert_unavailable(httpx.post(url + "/v1/audio/speech", json=body, timeout=30))
                assert _health(url) == 503
            assert thread.is_alive() and not server.should_exit
            release.set()
            chunks.extend(it)
        frames = int(r.headers["X-Codecspec-Frames"])
        assert frames > 50
        # the whole stream came (pcm at 24 kHz, 80 ms frames), not cut at the drain
        assert len(b"".join(chunks)) // 2 >= int(0.95 * frames * 0.08 * 24000)
        thread.join(timeout=60)
        assert not thread.is_alive(), "the server did not exit once the stream was done"
    finally:
        release.set()
        server.should_exit = True
        thread.join(timeout=30)
