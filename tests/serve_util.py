"""A real speech server (uvicorn + the FastAPI app + an Engine) on a free local port, run in a
background thread for the tests; and the IPA the tests speak (no espeak-ng needed)."""

from __future__ import annotations

import logging
import socket
import threading
import time

# espeak-ng's IPA for "Hello world. This is a test." and a longer utterance.
HELLO = "həlˈoʊ wˈɜːld | ðɪs ɪz ɐ tˈɛst"
LONG = " | ".join([HELLO] * 4)


def ipa(text=HELLO, **kw):
    """A speech request for IPA input (no espeak-ng needed)."""
    from codecspec.serve.engine import SpeechRequest

    return SpeechRequest(text, input_format="ipa", **kw)


def codes(handle):
    """Every frame a stream handle yields, stacked [T, C]."""
    import numpy as np

    return np.stack(list(handle))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    def __init__(self, engine_factory, **app_kw):
        import uvicorn

        from codecspec.serve.app import create_app

        self.app = create_app(engine_factory, **app_kw)
        self.port = free_port()
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        return self

    @property
    def engine(self):
        return self.app.state.engine

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=60)


def wait_for(pred, timeout: float = 30.0, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return pred()


def cancel_all(engine) -> None:
    """Cancels every queued and active stream of `engine` (they leave at the next step)."""
    with engine._cv:
        for s in list(engine._pending) + list(engine._active.values()):
            s.handle.cancel()
        engine._cv.notify()


def assert_idle(engine, grace: float = 5.0) -> None:
    """No active or queued stream and every slot free: what each serving test must leave
    behind. A stream left running is cancelled before failing, so it cannot run into (and
    time out) the next test that shares the engine."""
    if wait_for(lambda: not engine._active and not engine._pending, timeout=grace):
        assert len(engine._free) == engine.max_streams, engine._free
        return
    left = len(engine._active), len(engine._pending)
    cancel_all(engine)
    wait_for(lambda: not engine._active and not engine._pending, timeout=60)
    raise AssertionError(f"the test left {left[0]} active and {left[1]} queued streams")


class Tracebacks(logging.Handler):
    """Every log record at ERROR or above, or with an exception attached."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)
