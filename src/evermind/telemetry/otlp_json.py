"""OTLP/HTTP JSON: finished spans and metrics encoded as a collector reads them (browser-safe).

The encoding is the OTLP JSON protobuf mapping (opentelemetry-proto's
``docs/specification.md``, "JSON Protobuf Encoding"): ``ExportTraceServiceRequest`` and
``ExportMetricsServiceRequest`` with lowerCamelCase field names, trace and span ids as hex
strings (not base64, where OTLP departs from proto3's JSON), 64-bit integers (times in
nanoseconds, counts, ``intValue``) as decimal strings, enums as integers. A body goes to
``POST <collector>/v1/traces`` or ``/v1/metrics`` with ``Content-Type: application/json``.

What is here needs no transport: :class:`JsonExport` buffers finished spans in a bounded queue
(a full queue drops the new span and counts it: recording never waits), aggregates the
metrics (cumulative histograms and sums, as the SDK's default temporality) and hands out
request bodies; the native exporter posts them from a thread (:mod:`evermind.telemetry.otlp`),
the Studio through ``fetch`` (:mod:`evermind.studio.telemetry`).
"""

from __future__ import annotations

import json
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from evermind import __version__
from evermind.errors import ConfigError
from evermind.telemetry.genai import INSTRUMENTATION, INSTRUMENTS, SCHEMA_URL, Measurement

CONTENT_TYPE = "application/json"
TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
#: Spans kept waiting for export (the SDK's batch processor default); past it new ones drop.
MAX_QUEUE = 2048
#: Spans per request (the SDK's default batch size).
MAX_BATCH = 512
#: ``Span.SpanKind`` and ``Status.StatusCode`` of the OTLP protos.
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
#: ``AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE``.
CUMULATIVE = 2
#: Attribute sets kept per metric (the SDK's default cardinality limit); later ones are
#: counted in one overflow series marked ``otel.metric.overflow``, as the SDK does, so a
#: client sending ever new model names cannot grow the memory without bound.
MAX_SERIES = 2000
OVERFLOW = (("otel.metric.overflow", True),)


def check_endpoint(url: str) -> str:
    """``url`` without a trailing slash, if it is an ``http(s)://host[:port][/path]`` URL.

    Raises:
        ConfigError: Anything else (the exporter would fail on every export, silently).
    """
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (parsing the port raises on a bad one)
    except ValueError as err:
        raise ConfigError(f"OTLP endpoint {url!r}: {err}; expected http(s)://host:port") from err
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ConfigError(
            f"OTLP endpoint {url!r}: expected an http(s)://host[:port] base URL (the collector's "
            "OTLP/HTTP receiver, e.g. http://127.0.0.1:4318); /v1/traces and /v1/metrics are "
            "appended"
        )
    return url.strip().rstrip("/")


@dataclass
class SpanData:
    """One finished span, as the encoder needs it.

    Attributes:
        name: The span's name.
        trace_id: 32 lowercase hex digits.
        span_id: 16 lowercase hex digits.
        parent_span_id: The parent's 16 hex digits; empty for a root span.
        kind: ``KIND_INTERNAL``, ``KIND_SERVER`` or ``KIND_CLIENT``.
        start_ns: Start, nanoseconds since the Unix epoch.
        end_ns: End, likewise.
        attributes: Its attributes (str, bool, int, float or a sequence of them).
        status_code: ``STATUS_UNSET``, ``STATUS_OK`` or ``STATUS_ERROR``.
        status_message: Why it failed (with ``STATUS_ERROR``).
        events: ``(name, time_ns, attributes)`` of each event (an ``exception``).
    """

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = STATUS_UNSET
    status_message: str = ""
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)


def any_value(value: Any) -> dict[str, Any]:
    """An ``AnyValue``: ``stringValue``, ``boolValue``, ``intValue`` (a decimal string),
    ``doubleValue`` or ``arrayValue``; anything else as its ``str``."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence | set | frozenset):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def key_values(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Attributes as a list of ``KeyValue`` (a None value is left out, as the SDK does)."""
    return [
        {"key": key, "value": any_value(value)}
        for key, value in attributes.items()
        if value is not None
    ]


def _scope() -> dict[str, Any]:
    return {"name": INSTRUMENTATION, "version": __version__}


def encode_span(span: SpanData) -> dict[str, Any]:
    """One ``Span``."""
    encoded: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": key_values(span.attributes),
        "status": {"code": span.status_code},
    }
    if span.parent_span_id:
        encoded["parentSpanId"] = span.parent_span_id
    if span.status_message:
        encoded["status"]["message"] = span.status_message
    if span.events:
        encoded["events"] = [
            {"name": name, "timeUnixNano": str(at), "attributes": key_values(attributes)}
            for name, at, attributes in span.events
        ]
    return encoded


def trace_request(resource: Mapping[str, Any], spans: Sequence[SpanData]) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` of ``spans`` from one resource and scope."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": key_values(resource)},
                "scopeSpans": [
                    {
                        "scope": _scope(),
                        "schemaUrl": SCHEMA_URL,
                        "spans": [encode_span(span) for span in spans],
                    }
                ],
            }
        ]
    }


class _Series:
    """One metric's cumulative state for one attribute set."""

    def __init__(self, buckets: int) -> None:
        self.count = 0
        self.total = 0.0
        self.low = float("inf")
        self.high = float("-inf")
        self.counts = [0] * (buckets + 1)

    def add(self, value: float, bucket: int) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        self.counts[bucket] += 1


class MetricsAggregator:
    """Cumulative histograms and sums of :data:`~evermind.telemetry.genai.INSTRUMENTS`.

    Thread-safe; :meth:`record` costs a bisect per measurement under a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start_ns = time.time_ns()
        self._series: dict[str, dict[tuple[tuple[str, Any], ...], _Series]] = {}

    def record(self, measurements: Sequence[Measurement]) -> None:
        """Adds measurements (an unknown instrument name is a programming error: KeyError)."""
        with self._lock:
            for name, value, attributes in measurements:
                buckets = INSTRUMENTS[name].buckets
                labels = tuple(sorted((k, _hashable(v)) for k, v in attributes.items()))
                series = self._series.setdefault(name, {})
                if labels not in series and len(series) >= MAX_SERIES - 1:
                    labels = OVERFLOW
                state = series.get(labels)
                if state is None:
                    state = series[labels] = _Series(len(buckets))
                # Bucket i holds (bounds[i-1], bounds[i]]: bisect_left of the upper bound.
                state.add(float(value), bisect_left(buckets, value))

    def metrics(self) -> list[dict[str, Any]]:
        """Every metric recorded so far as an OTLP ``Metric`` (cumulative since the start)."""
        now = str(time.time_ns())
        start = str(self._start_ns)
        found = []
        with self._lock:
            for name, series in self._series.items():
                spec = INSTRUMENTS[name]
                points = []
                for labels, state in series.items():
                    point: dict[str, Any] = {
                        "attributes": key_values(dict(labels)),
                        "startTimeUnixNano": start,
                        "timeUnixNano": now,
                    }
                    if spec.kind == "histogram":
                        point.update(
                            count=str(state.count),
                            sum=state.total,
                            bucketCounts=[str(c) for c in state.counts],
                            explicitBounds=list(spec.buckets),
                            min=state.low,
                            max=state.high,
                        )
                    else:
                        point["asDouble"] = state.total
                    points.append(point)
                metric: dict[str, Any] = {
                    "name": name,
                    "description": spec.description,
                    "unit": spec.unit,
                }
                data = {"dataPoints": points, "aggregationTemporality": CUMULATIVE}
                if spec.kind == "histogram":
                    metric["histogram"] = data
                else:
                    metric["sum"] = {**data, "isMonotonic": True}
                found.append(metric)
        return found


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def metrics_request(
    resource: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """An ``ExportMetricsServiceRequest`` of ``metrics`` from one resource and scope."""
    return {
        "resourceMetrics": [
            {
                "resource": {"attributes": key_values(resource)},
                "scopeMetrics": [
                    {"scope": _scope(), "schemaUrl": SCHEMA_URL, "metrics": list(metrics)}
                ],
            }
        ]
    }


class JsonExport:
    """Finished spans and metrics waiting for export, handed out as OTLP JSON bodies.

    Args:
        resource: The resource's attributes (``service.name``, ...).
        max_queue: Spans kept at most; a span past it is dropped and counted.
    """

    def __init__(self, resource: Mapping[str, Any], max_queue: int = MAX_QUEUE) -> None:
        self.resource = dict(resource)
        self.max_queue = max_queue
        self.metrics = MetricsAggregator()
        self.dropped = 0
        self._spans: deque[SpanData] = deque()
        self._lock = threading.Lock()

    def add_span(self, span: SpanData) -> None:
        """Queues a finished span, or drops and counts it when the queue is full."""
        with self._lock:
            if len(self._spans) >= self.max_queue:
                self.dropped += 1
                return
            self._spans.append(span)

    def pending(self) -> int:
        """Spans waiting."""
        with self._lock:
            return len(self._spans)

    def take_spans(self, limit: int = MAX_BATCH) -> list[SpanData]:
        """Removes and returns up to ``limit`` of the oldest waiting spans."""
        with self._lock:
            return [self._spans.popleft() for _ in range(min(limit, len(self._spans)))]

    def trace_body(self, limit: int = MAX_BATCH) -> bytes | None:
        """The next ``/v1/traces`` body (up to ``limit`` spans, taken off the queue); None
        when none wait."""
        spans = self.take_spans(limit)
        return _dump(trace_request(self.resource, spans)) if spans else None

    def metrics_body(self) -> bytes | None:
        """The ``/v1/metrics`` body of everything recorded so far; None before any."""
        metrics = self.metrics.metrics()
        return _dump(metrics_request(self.resource, metrics)) if metrics else None


def _dump(request: dict[str, Any]) -> bytes:
    # Non-finite floats have no JSON form; a duration or a cost is always finite.
    return json.dumps(request, separators=(",", ":"), allow_nan=False).encode("utf-8")
