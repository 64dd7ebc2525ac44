"""Ray Serve: a local two-replica deployment answers the same API as `codecspec serve`."""

from __future__ import annotations

import asyncio

import pytest

httpx = pytest.importorskip("httpx")
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from serve_util import HELLO, free_port, wait_for  # noqa: E402

from codecspec.serve.bench import check_wav  # noqa: E402

# Serve's controller gives a starting HTTP proxy 3 readiness checks of 5 s, then kills it and
# starts another; serve.start() waits on the first one and raises ActorDiedError when it is
# killed. On a 2-core machine with both cores busy the proxy's process takes longer than
# 15 s to import and bind, so each check may take this long instead (read by the controller,
# which inherits the environment of the local cluster that ray.init starts).
PROXY_READY_CHECK_S = "120"


def _start_serve(port: int) -> None:
    """serve.start(), waiting on the proxy's own progress: serve.start gives it a fixed 60 s;
    when that runs out the proxy is still starting, and the wait goes on while it is."""
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    except TimeoutError:
        from ray.serve.schema import ProxyStatus

        def proxies():
            return set(serve.status().proxies.values())

        assert wait_for(lambda: ProxyStatus.STARTING not in proxies(), 600, every=1.0)
        assert proxies() == {ProxyStatus.HEALTHY}, proxies()


@pytest.fixture(scope="module")
def cluster():
    from codecspec.serve.ray import build_app

    port = free_port()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", PROXY_READY_CHECK_S)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _start_serve(port)
        opts = {
            "model": "reference",
            "replicas": 2,
            "max_streams": 2,
            "max_queue": 2,
            "threads": 1,
            "num_cpus": 0.5,
        }
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
    assert len({r.headers["X-Codecspec-Replica"] for r in rs}) == 2, "both replicas served"
    bad = httpx.post(cluster + "/v1/audio/speech", json={"input": HELLO, "speed": 99}, timeout=60)
    assert bad.status_code == 400 and "speed" in bad.json()["error"]["message"]
    same = [
        httpx.post(
            cluster + "/v1/audio/speech",
            json={"input": HELLO, "input_format": "ipa", "seed": 3},
            timeout=120,
        ).content
        for _ in range(2)
    ]
    assert same[0] == same[1], "a seed gives the same audio on any replica"


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_the_documented_serve_run_and_serve_status_commands(tmp_path):
    """`serve run codecspec.serve.ray:build_app ...` and `serve status` as docs/serving.md
    gives them, as processes, with Ray's token authentication on (RAY_AUTH_MODE=token)."""
    import os
    import secrets
    import shutil
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import codecspec

    serve_cli = shutil.which("serve") or str(Path(sys.executable).with_name("serve"))
    if not Path(serve_cli).exists():
        pytest.skip("the `serve` command of ray[serve] is not on PATH")
    if not (_free(8000) and _free(8265)):
        pytest.skip("serve run's default ports (8000, dashboard 8265) are taken")
    here = str(Path(codecspec.__file__).resolve().parents[1])
    env = dict(
        os.environ,
        PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""),
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(32),  # this cluster's own, not ~/.ray/auth_token
        RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S=PROXY_READY_CHECK_S,  # a busy machine
    )
    app = [
        "codecspec.serve.ray:build_app",
        "model=reference",
        "replicas=1",
        "max_streams=2",
        "num_cpus=0.5",
    ]
    log = open(tmp_path / "serve_run.log", "w")
    run = subprocess.Popen(
        [serve_cli, "run", *app],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = "http://127.0.0.1:8000"

    def up() -> bool:
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def status(env):
        return subprocess.run(
            [serve_cli, "status"], env=env, capture_output=True, text=True, timeout=120
        )

    try:
        ok = wait_for(lambda: run.poll() is None and up(), timeout=300, every=1.0)
        assert ok, (tmp_path / "serve_run.log").read_text()[-3000:]
        r = httpx.post(
            url + "/v1/audio/speech",
            json={"input": HELLO, "input_format": "ipa", "response_format": "wav", "seed": 1},
            timeout=120,
        )
        assert r.status_code == 200 and check_wav(r.content)[0]
        st = status(env)
        assert st.returncode == 0, st.stdout + st.stderr
        assert "RUNNING" in st.stdout and "codecspec-speech" in st.stdout
        # without the token the cluster refuses: the authentication is real
        no_token = {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
        no_token["HOME"] = str(tmp_path)  # and no ~/.ray/auth_token to fall back on
        assert status(no_token).returncode != 0
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)  # serve run shuts the app and its cluster down
            try:
                run.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        log.close()
