"""Load test of the Ray Serve app on a local Ray cluster (docs/serving.md).

    python bench/serve_ray_loadtest.py --replicas 2 --clients 64 --requests 3

Starts Ray with `--cpus` CPUs, deploys `codecspec.serve.ray:build_app` with `--replicas`
replicas of `64 / replicas` streams each (one CPU and one ONNX Runtime thread per replica),
runs `codecspec.serve.bench.load_test` against it, prints its JSON, and stops the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--streams", type=int, default=64, help="total slots over all replicas")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--port", type=int, default=8777)
    args = ap.parse_args()

    import ray
    from ray import serve

    from codecspec.serve.bench import load_test
    from codecspec.serve.ray import build_app

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        opts = {
            "replicas": args.replicas,
            "max_streams": args.streams // args.replicas,
            "threads": 1,
            "num_cpus": args.cpus / args.replicas,
        }
        serve.run(build_app(opts), name="codecspec", route_prefix="/")
        url = f"http://127.0.0.1:{args.port}"
        print(json.dumps(asyncio.run(load_test(url, args.clients, args.requests))))
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
