"""Ray Serve: a local two-replica deployment answers the same API as `codecspec serve`."""

from __future__ import annotations

import asyncio

import pytest

httpx = pytest.importorskip("httpx")
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from serve_util import HELLO, free_port, wait_for  # noqa: E402

from codecspec.serve.bench import check_wav  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    from codecspec.serve.ray import build_app

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        opts = {"replicas": 2, "max_streams": 2, "max_queue": 2, "threads": 1, "num_cpus": 0.5}
        serve.run(build_app(opts), name="codecspec", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_answer_the_speech_api(cluster):
    assert wait_for(lambda: httpx.get(cluster + "/health", timeout=5).status_code == 200, 60)

    async def run():
        async with httpx.AsyncClient(timeout=300) as c:
            body = {"input": HELLO, "input_format": "ipa", "response_format": "wav"}
            return await asyncio.gather(
                *(c.post(cluster + "/v1/audio/speech", json={**body, "seed": k}) for k in range(8))
            )

    rs = asyncio.run(run())
    assert [r.status_code for r in rs] == [200] * 8, [r.text[:200] for r in rs]
    assert all(check_wav(r.content)[0] for r in rs)
    assert len({r.headers["X-Codecspec-Process"] for r in rs}) == 2, "both replicas served"
    bad = httpx.post(cluster + "/v1/audio/speech", json={"input": HELLO, "speed": 99}, timeout=60)
    assert bad.status_code == 422 and "speed" in bad.json()["error"]["message"]
    same = [
        httpx.post(
            cluster + "/v1/audio/speech",
            json={"input": HELLO, "input_format": "ipa", "seed": 3},
            timeout=120,
        ).content
        for _ in range(2)
    ]
    assert same[0] == same[1], "a seed gives the same audio on any replica"
