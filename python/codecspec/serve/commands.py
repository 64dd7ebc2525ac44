"""What `codecspec serve`, `codecspec loadtest` and `codecspec bench --streams ...` run
(their options: `codecspec.cli.serve`, `codecspec.cli.loadtest`, `codecspec.cli.bench`)."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
from pathlib import Path
from typing import Optional

from codecspec.pipeline.registry import MODEL_NAMES

KEY_ENV = "CODECSPEC_API_KEY"
SERVE_EXTRA = "codecspec serve needs the serve extra: pip install 'codecspec[serve]'"


def serve_modules():
    """(uvicorn, create_app, Engine), or SystemExit with one line naming the extra."""
    try:
        import uvicorn

        from codecspec.serve.app import create_app
        from codecspec.serve.engine import Engine
    except ImportError as e:
        raise SystemExit(f"{SERVE_EXTRA} (missing: {e.name or e})") from None
    return uvicorn, create_app, Engine


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def api_key_of(args) -> Optional[str]:
    """--api-key, else $CODECSPEC_API_KEY, else None; SystemExit for a server that would
    leave the loopback interface without a key (unless --allow-no-key)."""
    key = args.api_key if args.api_key is not None else os.environ.get(KEY_ENV)
    if key is not None and not key.strip():
        raise SystemExit(f"--api-key / {KEY_ENV}: empty; give a key or leave it unset")
    if key is None and not is_loopback(args.host) and not args.allow_no_key:
        raise SystemExit(
            f"--host {args.host}: refusing to serve beyond this machine without a key; give "
            f"--api-key KEY (or {KEY_ENV}), or --allow-no-key to serve anyone who connects"
        )
    return key


def model_arg(s: str) -> str:
    """--model: a shipped model's name, or a model folder (a model.json, or a Qwen3-TTS
    checkpoint folder's config.json)."""
    if s in MODEL_NAMES:
        return s
    d = Path(s).expanduser()
    if not d.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected one of {list(MODEL_NAMES)} or a model folder, got {s!r}"
        )
    return str(d)


def check_model(args) -> None:
    """What can be checked before the server starts (a Base checkpoint without --ref-audio,
    --ref-audio for a model that clones no voice): one line instead of a start-up traceback."""
    from codecspec.pipeline import registry

    entry = registry.find(args.model)  # None: the engine reports the model in its terms
    given = dict(
        ref_audio=args.ref_audio,
        voices_dir=args.voices_dir,
        weights=args.weights,
        decoder_precision=args.decoder_precision,
    )
    registry.take_options(entry, flags=True, **given)
    if entry is not None:
        entry.load("engine").check_serve(args)


def cmd_serve(args) -> int:
    uvicorn, create_app, Engine = serve_modules()
    key = api_key_of(args)
    check_model(args)
    from codecspec.serve.heap import limit_arenas

    limit_arenas(2)  # before the engine's and the app's threads allocate (serve/heap.py)
    # The model is loaded here, before uvicorn starts: a broken folder is then the CLI's one
    # line (registry.ModelLoadError naming the file), not a traceback from the app's start-up.
    engine = Engine(
        args.model,
        max_streams=args.max_streams,
        max_queue=args.max_queue,
        provider=args.provider,
        threads=args.threads,
        admit=args.admit,
        cache_dir=args.cache_dir,
        ref_audio=args.ref_audio,
        voices_dir=args.voices_dir,
        weights=args.weights,
        decoder_precision=args.decoder_precision,
    )
    try:
        app = create_app(
            lambda: engine,
            vocoder_iters=args.vocoder_iters,
            api_key=key,
            metrics_open=args.metrics_open,
        )
        server = draining_server(
            app, args.drain_seconds, host=args.host, port=args.port, log_level="warning"
        )
        server.run()
    finally:
        engine.shutdown(drain=False, timeout=0.0)  # done already after a clean drain
    return 0


def draining_server(app, drain_seconds: float, **config):
    """A uvicorn Server for `app` (`config`: uvicorn.Config's keywords) that drains as
    docs/serving.md says. Uvicorn's own shutdown closes the listening socket at once, so
    during a drain new clients were refused a connection, not told to retry. Here the first
    SIGTERM / SIGINT only stops admission: the socket stays open, new requests and /health
    get 503 + Retry-After, and the in-flight streams go on; once the engine is idle (or after
    `drain_seconds`) uvicorn's shutdown runs (waiting up to `drain_seconds` more for the
    responses still being sent). A second SIGINT exits at once, as with uvicorn alone."""
    import time

    import uvicorn

    class DrainingServer(uvicorn.Server):
        drain_asked = False  # set by the signal handler, acted on in the event loop
        drain_since: Optional[float] = None

        def handle_exit(self, sig, frame) -> None:
            if self.drain_asked or self.should_exit:
                return super().handle_exit(sig, frame)
            # No locks here: a signal handler may interrupt the event loop while it holds
            # the engine's; `on_tick` (in the loop, every 0.1 s) stops admission instead.
            getattr(self, "_captured_signals", []).append(sig)  # re-raised after shutdown
            self.drain_asked = True

        async def on_tick(self, counter: int) -> bool:
            engine = getattr(app.state, "engine", None)
            if self.drain_asked and not self.should_exit:
                if self.drain_since is None:
                    self.drain_since = time.monotonic()
                    if engine is not None:
                        engine.stop_admitting()
                late = time.monotonic() - self.drain_since > drain_seconds
                if engine is None or engine.idle or late:
                    self.should_exit = True
            return await super().on_tick(counter)

    cfg = uvicorn.Config(app, timeout_graceful_shutdown=drain_seconds, **config)
    return DrainingServer(cfg)


def cmd_loadtest(args) -> int:
    from codecspec.serve.bench import load_test

    rows = []
    for n in args.clients:
        r = asyncio.run(load_test(args.url, n, args.requests, mode=args.mode))
        rows.append(r)
        if not args.json:
            print(
                f"clients={n} requests={r['requests']} valid={r['valid']} lost={r['lost']} "
                f"5xx={r['status_5xx']} 4xx={r['status_4xx']}: aggregate "
                f"{r['aggregate_realtime']:.2f}x real time, RTF p50 "
                f"{r['per_stream_rtf_p50']:.2f} p95 {r['per_stream_rtf_p95']:.2f}, TTFA p50 "
                f"{r['ttfa_ms_p50']:.0f} ms p95 {r['ttfa_ms_p95']:.0f} ms; after first audio: "
                f"{r['streams_slower_than_realtime_after_first_audio']} slower than real time "
                f"(RTF p95 {r['play_rtf_p95']:.2f}), {r['streams_stalled']} stalled",
                flush=True,
            )
    if args.json:
        print(json.dumps({"url": args.url, "streams": rows}))
    bad = sum(r["requests"] - r["valid"] for r in rows)
    return 0 if bad == 0 else 1


STREAM_MODES = ("ar", "spec", "auto")


def stream_modes(value: str) -> list:
    """--stream-mode: "both" (ar and spec) or a comma list of ar, spec, auto (auto: what the
    model's calibration chose per loop, e.g. v2's temporal speculation over an AR depth
    loop)."""
    if value == "both":
        return ["ar", "spec"]
    modes = [m.strip() for m in value.split(",")]
    bad = [m for m in modes if m not in STREAM_MODES]
    if bad or not modes:
        raise SystemExit(
            f"--stream-mode: expected 'both' or a list of {STREAM_MODES}, got {value!r}"
        )
    return modes


def cmd_bench_streams(args) -> int:
    from codecspec.serve.bench import engine_scaling, plot, table
    from codecspec.serve.engine import Engine

    wanted = stream_modes(args.stream_mode)
    engine = Engine(
        args.model,
        max_streams=max(args.streams),
        provider=args.provider,
        threads=args.threads or 1,  # see Engine: one thread per session unless told
    )
    # "both" means every mode the family has (the FSQ family has one decode loop: ar).
    modes = [m for m in wanted if m in engine.family.modes + ("auto",)]
    if not modes:
        engine.shutdown()
        raise SystemExit(
            f"--stream-mode: the {engine.family.name} family has {engine.family.modes}"
        )
    try:
        rows = [
            r
            for m in modes
            for r in engine_scaling(engine, args.streams, m, args.seed, progress=not args.json)
        ]
    finally:
        engine.shutdown()
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"streams": rows}))
    else:
        print(table(rows))
    return 0
