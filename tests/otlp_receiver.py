"""A loopback OTLP/HTTP receiver that decodes what it is sent as a collector does.

A real HTTP server on 127.0.0.1 (a thread) accepting ``POST /v1/traces`` and ``/v1/metrics``
in both OTLP/HTTP encodings, decoded with the official ``opentelemetry-proto`` classes:

- ``application/x-protobuf``: ``ParseFromString``;
- ``application/json``: ``google.protobuf.json_format.Parse`` with unknown fields refused,
  after the one step OTLP's JSON adds to proto3's (the collector's own unmarshaler does it):
  trace and span ids are hex, which must be exactly 32 / 16 lowercase hex digits, and become
  the bytes the proto holds. A body that does not decode is answered 400 and kept in
  ``rejected``, so a test sees why.

It answers a CORS preflight (``OPTIONS``) for any origin, as a collector configured for a
browser must (``cors.allowed_origins``), and sends ``Access-Control-Allow-Origin`` with
every answer.
"""

from __future__ import annotations

import base64
import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

#: The OTLP/HTTP paths: what is posted there, what answers, where the receiver keeps it.
SIGNALS: dict[str, tuple[Any, Any, str]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, "traces"),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, "metrics"),
}
#: How long a test waits for an export.
WAIT_S = 30.0
_ID_LENGTHS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def hex_ids_to_base64(node: Any) -> Any:
    """The OTLP JSON ``node`` with its hex ids as proto3 JSON's base64 (ValueError: not hex)."""
    if isinstance(node, list):
        return [hex_ids_to_base64(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {}
    for key, value in node.items():
        if key in _ID_LENGTHS and isinstance(value, str):
            if len(value) != _ID_LENGTHS[key] or value != value.lower():
                raise ValueError(f"{key} {value!r}: expected {_ID_LENGTHS[key]} lowercase hex")
            value = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        converted[key] = hex_ids_to_base64(value)
    return converted


def decode_json(body: bytes, request_type: Any) -> Any:
    """An OTLP JSON body as its protobuf message (ParseError / ValueError when invalid)."""
    import json

    message = request_type()
    json_format.ParseDict(hex_ids_to_base64(json.loads(body)), message)
    return message


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: what it was sent, decoded."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.content_types: set[str] = set()
        self.origins: set[str] = set()
        self.preflights = 0
        self.rejected: list[str] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _cors(self) -> None:
                self.send_header("Access-Control-Allow-Origin", self.headers.get("Origin", "*"))
                self.send_header("Vary", "Origin")

            def do_OPTIONS(self) -> None:
                with receiver.changed:
                    receiver.preflights += 1
                self.send_response(204)
                self._cors()
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                asked = self.headers.get("Access-Control-Request-Headers", "content-type")
                self.send_header("Access-Control-Allow-Headers", asked)
                self.send_header("Access-Control-Max-Age", "600")
                self.send_header("Content-Length", "0")
                self.end_headers()

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
                content_type = self.headers.get("Content-Type", "")
                try:
                    if content_type.split(";")[0].strip() == "application/json":
                        decoded = decode_json(body, request_type)
                        answer = json_format.MessageToJson(response_type()).encode()
                    else:
                        decoded = request_type()
                        decoded.ParseFromString(body)
                        answer = response_type().SerializeToString()
                except (ValueError, json_format.ParseError) as err:
                    with receiver.changed:
                        receiver.rejected.append(f"{self.path}: {err}")
                        receiver.changed.notify_all()
                    self.send_response(400)
                    self._cors()
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with receiver.changed:
                    receiver.content_types.add(content_type)
                    receiver.origins.add(self.headers.get("Origin", ""))
                    getattr(receiver, signal).append(decoded)
                    receiver.changed.notify_all()
                self.send_response(200)
                self._cors()
                self.send_header("Content-Type", content_type or "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, found: Callable[[], Any], what: str, wait_s: float = WAIT_S) -> Any:
        """The first truthy ``found()``, re-checked on every export; fails after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        with self.changed:
            while True:
                assert not self.rejected, f"the receiver refused a body: {self.rejected}"
                result = found()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {wait_s} s")
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
        """The latest export of each metric, by name."""
        return {
            metric.name: metric
            for request in self.metrics
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    """A started :class:`Receiver`, shut down after the block."""
    receiver = Receiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def value_of(value: AnyValue) -> Any:
    """A decoded ``AnyValue`` as Python (an array as a tuple)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    """Decoded ``KeyValue`` pairs as a dict."""
    items: list[KeyValue] = list(pairs)
    return {pair.key: value_of(pair.value) for pair in items}
