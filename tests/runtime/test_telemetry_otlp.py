"""``evermind serve --otlp-endpoint`` in a child process exports real OTLP/HTTP to a receiver on
loopback (:mod:`tests.otlp_receiver`) that decodes ``POST /v1/traces`` and ``/v1/metrics``
with ``opentelemetry-proto``, as a collector would: protobuf from the OpenTelemetry SDK, and
OTLP JSON from the standard-library exporter (``OTEL_EXPORTER_OTLP_PROTOCOL=http/json``, what
also runs when the SDK is not installed). Both must carry the same spans and metrics.

Two identical gateway calls (to the loopback OpenAI upstream) arrive as ``chat gpt-4o-mini``
spans, a miss with its upstream child and a hit, with the ``gen_ai.*`` and
``evermind.cache.*`` attributes and the runtime's resource; the GenAI histograms arrive as
metrics; ``/metrics`` keeps answering in Prometheus text; a graceful stop flushes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.otlp_receiver import Receiver, attributes_of, running_receiver
from tests.runtime.helpers import TOKEN_A, ServerProcess, bearer, write_tokens
from tests.upstreams import OpenAIUpstream

OPENAI_KEY = "sk-otlp-openai-0b6d44"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


#: The SDK's protobuf, and our JSON (what runs when the SDK is absent), chosen the standard way.
PROTOCOLS = {"http/protobuf": "application/x-protobuf", "http/json": "application/json"}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_serve_exports_genai_spans_and_metrics_over_otlp_http(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # ms: export spans quickly
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "evermind-under-test")
    with OpenAIUpstream(OPENAI_KEY) as gpt:
        upstreams = tmp_path / "upstreams.json"
        upstreams.write_text(
            json.dumps(
                {
                    "cache": {"embedder": "terms", "verify_sample": 0.0},  # counts spans
                    "upstreams": {
                        "openai": {
                            "protocol": "openai",
                            "base_url": gpt.url + "/v1",
                            "api_key": OPENAI_KEY,
                            "max_retries": 0,
                        }
                    },
                }
            ),
            encoding="utf-8",
        )
        server = ServerProcess(
            tmp_path / "data",
            write_tokens(tmp_path / "tokens.txt"),
            tmp_path / "server.log",
            args=("--upstreams", str(upstreams), "--otlp-endpoint", receiver.url + "/"),
        )
        server.start()
        try:
            _exercise(server, receiver, PROTOCOLS[protocol])
        finally:
            server.stop()
    # A graceful stop flushed: nothing is lost that was recorded before it.
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= set(
        receiver.metric_names()
    )


def _exercise(server: ServerProcess, receiver: Receiver, content_type: str) -> None:
    body = {
        "model": "openai/gpt-4o-mini",
        "messages": [{"role": "user", "content": "How do I copy a list in Python?"}],
        "temperature": 0,
    }
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=30) as alpha:
        statuses = [alpha.post("/v1/chat/completions", json=body) for _ in range(2)]
        assert [r.headers["x-evermind-cache"] for r in statuses] == ["miss", "hit-l1"]
        usage = statuses[0].json()["usage"]
        prometheus = alpha.get("/metrics")
    assert prometheus.status_code == 200
    assert prometheus.headers["content-type"].startswith("text/plain")
    assert 'cache="hit-l1"} 1' in prometheus.text and 'cache="miss"} 1' in prometheus.text

    def chat_spans() -> list[tuple[dict[str, Any], Any]]:
        found = [(r, s) for r, s in receiver.spans() if s.name == "chat gpt-4o-mini"]
        return found if len(found) >= 3 else []

    spans = receiver.wait_for(chat_spans, "three chat spans")
    assert receiver.content_types == {content_type}
    resource = spans[0][0]
    assert resource["service.name"] == "evermind-under-test"
    assert resource["telemetry.sdk.language"] == "python"
    by_id = {s.span_id: s for _, s in spans}
    child = next(s for _, s in spans if s.parent_span_id)
    parent = by_id[child.parent_span_id]
    hit = next(s for _, s in spans if s not in (child, parent))
    assert child.trace_id == parent.trace_id != hit.trace_id
    outer, upstream, served = (attributes_of(s.attributes) for s in (parent, child, hit))
    for attributes in (outer, upstream):
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "gpt-4o-mini"
        assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
        assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
        assert attributes["evermind.cost_usd"] > 0
    assert outer["evermind.cache.hit"] is False and served["evermind.cache.hit"] is True
    assert served["evermind.cache.saved.output_tokens"] == usage["completion_tokens"]
    assert parent.kind == child.kind == 3  # SPAN_KIND_CLIENT in the OTLP enum
    request_span = next(s for _, s in receiver.spans() if s.span_id == parent.parent_span_id)
    assert request_span.name == "POST /v1/chat/completions" and request_span.kind == 2  # SERVER
    assert attributes_of(request_span.attributes)["http.response.status_code"] == 200
    assert child.start_time_unix_nano >= parent.start_time_unix_nano > 0
    assert child.end_time_unix_nano <= parent.end_time_unix_nano

    def both_calls() -> dict[str, Any]:
        found = receiver.metric_names()  # the latest export of each (cumulative) metric
        duration = found.get("gen_ai.client.operation.duration")
        counted = 0 if duration is None else sum(p.count for p in duration.histogram.data_points)
        return found if counted >= 2 else {}

    metrics = receiver.wait_for(both_calls, "the duration metric of both calls")
    durations = metrics["gen_ai.client.operation.duration"].histogram.data_points
    assert sum(p.count for p in durations) == 2  # the miss and the hit, once each
    points = metrics["gen_ai.client.token.usage"].histogram.data_points
    totals = {attributes_of(p.attributes)["gen_ai.token.type"]: p.sum for p in points}
    assert totals == {"input": usage["prompt_tokens"], "output": usage["completion_tokens"]}
