"""Scale-out on Ray Serve: replicas that each run one continuous-batching `Engine` behind the
same HTTP API as `codecspec serve`.

    export RAY_AUTH_MODE=token    # Ray >= 2.5x: token authentication; both commands need it
    serve run codecspec.serve.ray:app                      # defaults
    serve run codecspec.serve.ray:build_app max_streams=32 max_replicas=8
    serve status

Ray's own token (`RAY_AUTH_TOKEN`, or the file ~/.ray/auth_token that the first `serve run`
creates) guards the cluster; the speech API's key is a different one, read from
$CODECSPEC_API_KEY by every replica (never an application argument: those are logged).

Each request is one stream, so Ray Serve's count of ongoing requests per replica is the
engine's active streams plus its queue; autoscaling targets `max_streams` of them per replica,
i.e. replicas are added when the engines' queues fill. A replica accepts at most
`max_streams + max_queue` requests (the engine's own bounded queue) and Ray queues at most
`max_queued` more per caller before answering 503: memory stays bounded at every level.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ray import serve

from codecspec.serve.app import create_app
from codecspec.serve.commands import KEY_ENV
from codecspec.serve.engine import Engine


def _int(args: dict, key: str, default: Optional[int]) -> Optional[int]:
    v = args.get(key, default)
    return None if v is None else int(v)


def build_app(args: Optional[dict[str, Any]] = None):
    """A Ray Serve application. Options (strings from `serve run ... key=value` or a dict):
    model (a name or folder; default: the registry's default, v3), max_streams (16),
    max_queue (= max_streams), threads (ONNX Runtime threads per replica), provider (cpu),
    admit (realtime | max, as `codecspec serve --admit`; default realtime), replicas (a fixed
    count; otherwise autoscaling between min_replicas (1) and max_replicas (4)), max_queued
    (Ray's per-caller queue, 4 x max_streams), num_cpus (per replica, 1), metrics_open (1:
    /metrics without the API key)."""
    args = dict(args or {})
    max_streams = _int(args, "max_streams", 16)
    max_queue = _int(args, "max_queue", max_streams)
    threads = _int(args, "threads", 1)
    provider = str(args.get("provider", "cpu"))
    engine_kw = dict(
        model_dir=args.get("model"),  # None: the registry's default model
        max_streams=max_streams,
        max_queue=max_queue,
        threads=threads,
        provider=provider,
        admit=str(args.get("admit", "realtime")),
    )
    scaling: dict[str, Any]
    if "replicas" in args:
        scaling = {"num_replicas": int(args["replicas"])}
    else:
        scaling = {
            "autoscaling_config": {
                "min_replicas": _int(args, "min_replicas", 1),
                "max_replicas": _int(args, "max_replicas", 4),
                "target_ongoing_requests": max_streams,
                "upscale_delay_s": 5.0,
                "downscale_delay_s": 60.0,
            }
        }
    fastapi_app = create_app(
        lambda: Engine(**engine_kw),
        api_key=os.environ.get(KEY_ENV) or None,
        metrics_open=str(args.get("metrics_open", "0")).lower() in ("1", "true", "yes"),
    )

    @serve.deployment(
        name="codecspec-speech",
        max_ongoing_requests=max_streams + max_queue,
        max_queued_requests=_int(args, "max_queued", 4 * max_streams),
        ray_actor_options={"num_cpus": float(args.get("num_cpus", 1))},
        health_check_period_s=10,
        **scaling,
    )
    @serve.ingress(fastapi_app)
    class SpeechReplica:
        """One engine per replica; the FastAPI app's lifespan creates and drains it."""

    return SpeechReplica.bind()


app = build_app()
