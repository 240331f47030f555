"""``evermind serve --otlp-endpoint`` in a child process exports real OTLP/HTTP to a receiver on
loopback: a small HTTP server that accepts ``POST /v1/traces`` and ``/v1/metrics`` protobuf
bodies and decodes them with ``opentelemetry-proto``, as a collector would.

Two identical gateway calls (to the loopback OpenAI upstream) arrive as ``chat gpt-4o-mini``
spans, a miss with its upstream child and a hit, with the ``gen_ai.*`` and
``evermind.cache.*`` attributes and the runtime's resource; the GenAI histograms arrive as
metrics; ``/metrics`` keeps answering in Prometheus text; a graceful stop flushes.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.runtime.helpers import TOKEN_A, ServerProcess, bearer, write_tokens
from tests.upstreams import OpenAIUpstream

OPENAI_KEY = "sk-otlp-openai-0b6d44"
#: The OTLP/HTTP paths: what is posted there, what answers, where the receiver keeps it.
SIGNALS: dict[str, tuple[Any, Any, str]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, "traces"),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, "metrics"),
}
#: How long the test waits for an export (the child exports every 0.2 s / 0.5 s).
WAIT_S = 30.0


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: what it was sent, decoded."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.content_types: set[str] = set()
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path not in SIGNALS:
                    self.send_error(404)
                    return
                request_type, response_type, signal = SIGNALS[self.path]
                sink: list[Any] = getattr(receiver, signal)
                decoded = request_type()
                decoded.ParseFromString(body)
                with receiver.changed:
                    receiver.content_types.add(self.headers.get("Content-Type", ""))
                    sink.append(decoded)
                    receiver.changed.notify_all()
                answer = response_type().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, found: Callable[[], Any], what: str) -> Any:
        """The first truthy ``found()``, re-checked on every export; fails after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        with self.changed:
            while True:
                result = found()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {WAIT_S} s")
                self.changed.wait(left)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received."""
        return [
            (attributes_of(resource.resource.attributes), span)
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def metric_names(self) -> dict[str, Any]:
        return {
            metric.name: metric
            for request in self.metrics
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    items: list[KeyValue] = list(pairs)
    return {pair.key: value_of(pair.value) for pair in items}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


def test_serve_exports_genai_spans_and_metrics_over_otlp_http(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
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
            _exercise(server, receiver)
        finally:
            server.stop()
    # A graceful stop flushed: nothing is lost that was recorded before it.
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= set(
        receiver.metric_names()
    )


def _exercise(server: ServerProcess, receiver: Receiver) -> None:
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
    assert receiver.content_types == {"application/x-protobuf"}
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
