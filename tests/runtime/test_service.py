"""Service endpoints and behaviour: health, metrics, docs, CORS, a free event loop."""

from __future__ import annotations

import threading
import time

import httpx

from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from tests.factories import tiny_package


def test_healthz_metrics_and_docs(server: ServerThread, alpha: httpx.Client) -> None:
    assert httpx.get(server.url + "/healthz").json()["status"] == "ok"
    assert alpha.post("/v1/models", content=tiny_package("metered", "1.0.0")).status_code == 201
    body = {"model": "evermind/metered", "prompt": "x", "max_tokens": 3, "temperature": 0}
    assert alpha.post("/v1/completions", json=body).status_code == 200
    alpha.post("/v1/semantic-cache/lookup", json={"embedding": [1.0, 2.0]})
    text = httpx.get(server.url + "/metrics").text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    key = 'evermind_requests_total{route="/v1/completions",method="POST",status="200"}'
    assert int(lines[key]) >= 1
    assert int(lines['evermind_tokens_total{kind="completion"}']) >= 1
    assert int(lines['evermind_semantic_cache_total{event="miss"}']) >= 1
    assert float(lines["evermind_models_loaded"]) >= 1
    assert 'evermind_request_duration_seconds_bucket{route="/v1/completions",le="+Inf"}' in lines
    schema = httpx.get(server.url + "/openapi.json").json()
    for path in ("/v1/models", "/v1/chat/completions", "/v1/embeddings", "/v1/memory/recall"):
        assert path in schema["paths"]
    docs = httpx.get(server.url + "/docs")
    assert docs.status_code == 200
    # The docs page is offline too: its assets come from this server, not a CDN.
    assert "cdn" not in docs.text.lower() and "/docs/assets/swagger-ui-bundle.js" in docs.text
    assert httpx.get(server.url + "/docs/assets/swagger-ui-bundle.js").status_code == 200
    assert httpx.get(server.url + "/nowhere").json()["error"]["code"] == "not_found"


def test_cors_allows_loopback_origins_only(server: ServerThread) -> None:
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(
            server.url + "/v1/models",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )

    studio = preflight("http://127.0.0.1:8765")
    assert studio.status_code == 200
    assert studio.headers["access-control-allow-origin"] == "http://127.0.0.1:8765"
    assert preflight("http://localhost:3000").status_code == 200
    stranger = preflight("https://evil.example")
    assert "access-control-allow-origin" not in stranger.headers


def test_generation_does_not_block_the_event_loop(tmp_path) -> None:
    # Its own server: the shared one caps packages at 100 kB, and this test needs a model
    # slow enough (d_model 96, 4 layers: ~0.2 s per 512 tokens) for the timing to mean
    # something on a loaded machine.
    config = RuntimeConfig(
        data_dir=tmp_path / "data",
        port=0,
        insecure_no_auth=True,
        max_tokens_cap=512,
        worker_threads=4,
    )
    with (
        ServerThread(config) as busy_server,
        httpx.Client(base_url=busy_server.url, timeout=60) as client,
    ):
        _check_event_loop_stays_free(busy_server, client)


def _check_event_loop_stays_free(server: ServerThread, alpha: httpx.Client) -> None:
    package = tiny_package("busy", "1.0.0", steps=1, d_model=96, n_layer=4)
    assert alpha.post("/v1/models", content=package).status_code == 201
    # A health check started after the generations must come back before the first finishes.
    body = {"model": "evermind/busy", "prompt": "The", "max_tokens": 512, "temperature": 0}
    alpha.post("/v1/completions", json={**body, "max_tokens": 1})  # load the model first
    finished: list[float] = []

    def generate() -> None:
        assert alpha.post("/v1/completions", json=body).status_code == 200
        finished.append(time.perf_counter())

    workers = [threading.Thread(target=generate) for _ in range(3)]
    for worker in workers:
        worker.start()
    answered: list[float] = []
    while any(w.is_alive() for w in workers):
        assert httpx.get(server.url + "/healthz").status_code == 200
        answered.append(time.perf_counter())
    for worker in workers:
        worker.join()
    assert len(finished) == 3
    # Were generation run on the event loop, no health check could finish before the first
    # generation did; on the worker pool they are answered meanwhile.
    assert answered and answered[0] < min(finished), (answered, finished)
