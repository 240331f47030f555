"""The standard-library OTLP JSON export: what it encodes is what opentelemetry-proto decodes.

The same scripted operations (a SERVER span continuing a ``traceparent``, a cache layer
around an upstream call, a stream, a failure) run through the native backend; its
``/v1/traces`` and ``/v1/metrics`` bodies are decoded with the official protobuf classes
(``json_format``, unknown fields refused, ids hex) and checked field by field. The metrics of
both backends come from one derivation: the SDK's in-memory reader and the native aggregator
must agree on every count, sum and bucket. A full queue drops and counts; a dead collector
costs the poster a logged failure, never an exception.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from evermind import telemetry
from evermind.errors import ConfigError
from evermind.telemetry import genai
from evermind.telemetry.otel import OtelTelemetry
from evermind.telemetry.otlp import JsonPoster, configure, configure_json, parse_headers
from evermind.telemetry.otlp_json import (
    MAX_SERIES,
    JsonExport,
    SpanData,
    any_value,
    key_values,
)
from evermind.telemetry.tracing import NativeTelemetry, parse_traceparent
from tests.otlp_receiver import attributes_of, decode_json, running_receiver

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Refused(Exception):
    code = "upstream_rate_limited"


def script(backend: genai.Telemetry) -> None:
    """Operations as the runtime makes them: a request with a cached call around an upstream
    call, a hit, a stream, and a failure."""
    genai.activate(backend)
    try:
        headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
        with backend.serve("POST", "/v1/chat/completions", "/v1/chat/completions", headers) as s:
            outer = telemetry.start_operation("chat", "openai", "gpt-4o-mini", {})
            with outer.current():
                inner = telemetry.start_operation(
                    "chat", "openai", "gpt-4o-mini", {genai.REQUEST_MAX_TOKENS: 64}
                )
                inner.finish(input_tokens=12, output_tokens=5, cost_usd=0.25)
            outer.finish(
                input_tokens=12,
                output_tokens=5,
                cost_usd=0.25,
                attributes={
                    genai.CACHE_HIT: False,
                    genai.RESPONSE_FINISH_REASONS: ["stop"],
                    genai.CACHE_SCORE: 0.5,
                },
            )
            backend.finish_server(s, 200)
        hit = telemetry.start_operation("chat", "openai", "gpt-4o-mini", {})
        hit.finish(
            input_tokens=0, output_tokens=0, cost_usd=0.0, attributes={genai.CACHE_HIT: True}
        )
        stream = telemetry.start_operation("chat", "anthropic", "claude", {}, local=True)
        stream.first_chunk()
        stream.finish(input_tokens=300, output_tokens=70)
        failed = telemetry.start_operation("chat", "anthropic", "claude", {})
        failed.fail(Refused("429 from upstream"))
    finally:
        genai.uninstall(backend)


def native_run() -> JsonExport:
    export = JsonExport({"service.name": "unit"})
    script(NativeTelemetry(export))
    return export


def test_spans_decode_with_opentelemetry_proto_field_by_field() -> None:
    export = native_run()
    body = export.trace_body()
    assert body is not None and export.trace_body() is None  # one body took every span
    raw = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]
    assert raw["scope"]["name"] == "evermind"
    assert all(isinstance(s["startTimeUnixNano"], str) for s in raw["spans"])  # int64: strings
    decoded = decode_json(body, ExportTraceServiceRequest)
    (resource,) = decoded.resource_spans
    assert attributes_of(resource.resource.attributes) == {"service.name": "unit"}
    spans = {s.name + str(i): s for i, s in enumerate(resource.scope_spans[0].spans)}
    inner, outer, server, hit, stream, failed = spans.values()
    assert server.name == "POST /v1/chat/completions" and server.kind == 2  # SERVER
    assert server.trace_id.hex() == CALLER_TRACE and server.parent_span_id.hex() == CALLER_SPAN
    assert outer.parent_span_id == server.span_id and inner.parent_span_id == outer.span_id
    assert inner.trace_id == outer.trace_id == server.trace_id
    assert hit.trace_id != server.trace_id and not hit.parent_span_id  # a new trace
    assert outer.kind == 3 and stream.kind == 1  # CLIENT; INTERNAL for a local model
    assert 0 < outer.start_time_unix_nano <= inner.start_time_unix_nano
    assert inner.end_time_unix_nano <= outer.end_time_unix_nano <= server.end_time_unix_nano
    assert attributes_of(server.attributes)["http.response.status_code"] == 200
    assert server.status.code == 0  # UNSET: a 2xx
    values = attributes_of(outer.attributes)
    assert values["gen_ai.usage.input_tokens"] == 12  # intValue, sent as a string
    assert values["evermind.cost_usd"] == 0.25 and values["evermind.cache.score"] == 0.5
    assert values["evermind.cache.hit"] is False
    assert values["gen_ai.response.finish_reasons"] == ("stop",)
    assert values["gen_ai.system"] == values["gen_ai.provider.name"] == "openai"
    assert attributes_of(inner.attributes)["gen_ai.request.max_tokens"] == 64
    assert failed.status.code == 2 and failed.status.message == "429 from upstream"
    assert attributes_of(failed.attributes)["error.type"] == "upstream_rate_limited"
    (event,) = failed.events
    assert event.name == "exception"
    assert attributes_of(event.attributes)["exception.type"] == "Refused"


def _sdk_points(reader: InMemoryMetricReader) -> dict[tuple[str, frozenset[Any]], Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        (metric.name, frozenset(dict(point.attributes).items())): point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }


def test_both_backends_derive_the_same_metrics() -> None:
    reader = InMemoryMetricReader()
    script(OtelTelemetry(TracerProvider(), MeterProvider(metric_readers=[reader])))
    expected = _sdk_points(reader)
    body = native_run().metrics_body()
    assert body is not None
    decoded = decode_json(body, ExportMetricsServiceRequest)
    metrics = decoded.resource_metrics[0].scope_metrics[0].metrics
    got = {}
    for metric in metrics:
        data = metric.histogram if metric.HasField("histogram") else metric.sum
        assert data.aggregation_temporality == 2  # CUMULATIVE, as the SDK's default
        for point in data.data_points:
            key = (metric.name, frozenset(attributes_of(point.attributes).items()))
            got[key] = point
    assert got.keys() == expected.keys()
    names = {name for name, _ in got}
    assert names == set(genai.INSTRUMENTS)  # tokens, duration, first chunk, cost
    for key, ours in got.items():
        theirs = expected[key]
        if key[0] == genai.COST:
            assert ours.as_double == pytest.approx(theirs.value)
            continue
        assert ours.count == theirs.count
        assert list(ours.explicit_bounds) == list(theirs.explicit_bounds)
        if key[0] == genai.TOKEN_USAGE:  # durations differ between two runs; tokens do not
            assert ours.sum == theirs.sum and list(ours.bucket_counts) == list(theirs.bucket_counts)
        assert sum(ours.bucket_counts) == ours.count
    # Counted once per call: the miss (not its inner call), the hit, the stream, the failure.
    durations = [p for (n, _), p in got.items() if n == genai.OPERATION_DURATION]
    assert sum(p.count for p in durations) == 4
    openai_tokens = [
        (dict(labels), p.sum)
        for (n, labels), p in got.items()
        if n == genai.TOKEN_USAGE and dict(labels)["gen_ai.provider.name"] == "openai"
    ]
    tokens = {labels["gen_ai.token.type"]: total for labels, total in openai_tokens}
    assert tokens == {"input": 12, "output": 5}


def test_a_full_queue_drops_and_counts_and_batches_are_bounded() -> None:
    export = JsonExport({"service.name": "unit"}, max_queue=3)
    for i in range(5):
        export.add_span(SpanData(f"s{i}", "a" * 32, f"{i:016x}", "", 1, 1, 2))
    assert export.pending() == 3 and export.dropped == 2
    first = decode_json(export.trace_body(limit=2) or b"", ExportTraceServiceRequest)
    assert [s.name for s in first.resource_spans[0].scope_spans[0].spans] == ["s0", "s1"]
    assert export.pending() == 1


def test_values_and_traceparents() -> None:
    assert key_values({"gone": None, "kept": 1}) == [{"key": "kept", "value": {"intValue": "1"}}]
    assert any_value(True) == {"boolValue": True}
    assert any_value(2**40) == {"intValue": str(2**40)}
    assert any_value(0.5) == {"doubleValue": 0.5}
    assert any_value(("a", 1)) == {
        "arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}
    }
    assert parse_traceparent(f"00-{CALLER_TRACE}-{CALLER_SPAN}-01") == (CALLER_TRACE, CALLER_SPAN)
    assert parse_traceparent(f"01-{CALLER_TRACE}-{CALLER_SPAN}-01-later") == (
        CALLER_TRACE,
        CALLER_SPAN,
    )
    zero = "0" * 32
    for bad in (
        None,
        "",
        "garbage",
        f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01",
        f"00-{zero}-{CALLER_SPAN}-01",
        f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-x",
    ):
        assert parse_traceparent(bad) is None


def test_settings_are_checked() -> None:
    assert parse_headers("api-key=a%20b, x=1") == {"api-key": "a b", "x": "1"}
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_headers("no-equals-sign")
    with pytest.raises(ConfigError, match="OTEL_BSP_SCHEDULE_DELAY"):
        configure_json("http://127.0.0.1:4318", environ={"OTEL_BSP_SCHEDULE_DELAY": "soon"})


def test_grpc_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="http/protobuf or http/json"):
        configure("http://127.0.0.1:4317")


def _dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_poster_delivers_and_survives_a_dead_collector() -> None:
    export = native_run()
    dead = f"http://127.0.0.1:{_dead_port()}"
    poster = JsonPoster(export, traces_url=dead + "/v1/traces", metrics_url=dead + "/v1/metrics",
                        headers={}, span_delay_s=60, metric_interval_s=60, timeout_s=2)  # fmt: skip
    started = time.monotonic()
    poster.close()  # never started: posts what waits, to nobody
    assert poster.failed == 2 and poster.posted == 0 and time.monotonic() - started < 10
    script(NativeTelemetry(export))
    with running_receiver() as receiver:
        poster = JsonPoster(
            export,
            traces_url=receiver.url + "/v1/traces",
            metrics_url=receiver.url + "/v1/metrics",
            headers={"x-api-key": "k"},
            span_delay_s=0.05,
            metric_interval_s=0.05,
        )
        poster.start()
        receiver.wait_for(lambda: len(receiver.spans()) >= 6 and receiver.metrics, "an export")
        poster.close()
    assert poster.failed == 0 and receiver.content_types == {"application/json"}


def test_metric_series_are_capped_and_ended_spans_frozen() -> None:
    export = JsonExport({"service.name": "unit"}, max_queue=MAX_SERIES + 100)
    backend = NativeTelemetry(export)
    genai.activate(backend)
    try:
        for i in range(MAX_SERIES + 50):  # a client naming a new model every time
            telemetry.start_operation("chat", "openai", f"model-{i}", {}).finish()
        late = telemetry.start_operation("chat", "openai", "late", {})
        late.finish(input_tokens=3)
        late.set({genai.RESPONSE_MODEL: "after-the-end", "none": None})
    finally:
        genai.uninstall(backend)
    decoded = decode_json(export.metrics_body() or b"", ExportMetricsServiceRequest)
    metrics = {m.name: m for m in decoded.resource_metrics[0].scope_metrics[0].metrics}
    duration = metrics[genai.OPERATION_DURATION]
    points = duration.histogram.data_points
    assert len(points) == MAX_SERIES
    overflow = [p for p in points if attributes_of(p.attributes) == {"otel.metric.overflow": True}]
    assert len(overflow) == 1 and overflow[0].count == 52  # every call still counted
    assert sum(p.count for p in points) == MAX_SERIES + 51
    traces = decode_json(export.trace_body(limit=5000) or b"", ExportTraceServiceRequest)
    spans = {s.name: s for s in traces.resource_spans[0].scope_spans[0].spans}
    assert "gen_ai.response.model" not in attributes_of(spans["chat late"].attributes)
