"""The telemetry backend on the standard library: spans and metrics for the OTLP JSON export.

:class:`NativeTelemetry` records what :class:`evermind.telemetry.otel.OtelTelemetry` records,
without OpenTelemetry: random W3C ids, the current span in a :class:`contextvars.ContextVar`
(so an ``asyncio`` task or a thread sees its own), a SERVER span continuing a request's
``traceparent``. A finished span goes to a :class:`~evermind.telemetry.otlp_json.JsonExport`
queue, an outermost operation's measurements to its aggregator; recording never waits on the
network. Browser-safe: the Studio uses it in the tab, the runtime when the SDK is absent.
"""

from __future__ import annotations

import re
import secrets
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from evermind.telemetry.genai import (
    HTTP_METHOD,
    HTTP_ROUTE,
    URL_PATH,
    Measurement,
    Telemetry,
)
from evermind.telemetry.otlp_json import (
    KIND_CLIENT,
    KIND_INTERNAL,
    KIND_SERVER,
    STATUS_ERROR,
    JsonExport,
    SpanData,
)

#: ``version-traceid-parentid-flags`` of W3C trace context (version 00; later versions may
#: append fields, which a version-00 reader ignores).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """``(trace_id, parent_span_id)`` of a valid ``traceparent`` header; None otherwise
    (absent, malformed, version ``ff``, or an all-zero id: the caller starts a new trace)."""
    if not value:
        return None
    found = _TRACEPARENT.match(value.strip().lower())
    if found is None:
        return None
    version, trace_id, span_id, _flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return trace_id, span_id


class NativeSpan:
    """A span being recorded; :meth:`end` hands it to the export (once)."""

    def __init__(self, data: SpanData, on_end: Callable[[SpanData], None]) -> None:
        self.data = data
        self._on_end = on_end

    def set_attribute(self, key: str, value: Any) -> None:
        """Sets one attribute; ignored once the span ended (it may be being exported)."""
        if self.data.end_ns:
            return
        self.data.attributes[key] = list(value) if isinstance(value, tuple) else value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def end(self) -> None:
        if self.data.end_ns:
            return
        self.data.end_ns = time.time_ns()
        self._on_end(self.data)


#: The current span and whether it is an operation's, per task / thread.
_current: ContextVar[tuple[NativeSpan, bool] | None] = ContextVar(
    "evermind_native_span", default=None
)


def _current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the current span; None when there is none."""
    current = _current.get()
    return None if current is None else (current[0].data.trace_id, current[0].data.span_id)


class NativeTelemetry(Telemetry):
    """Spans and metrics recorded into a :class:`JsonExport` (the standard library only).

    Args:
        export: Where finished spans and measurements go.
        on_shutdown: Called by :meth:`shutdown` (the native exporter's final flush).
    """

    def __init__(self, export: JsonExport, on_shutdown: Callable[[], None] | None = None):
        self.export = export
        self._on_shutdown = on_shutdown

    def _span(self, name: str, kind: int, attributes: Mapping[str, Any], parent: Any) -> NativeSpan:
        """A started span under ``parent``: ``(trace_id, span_id)`` or None for a new trace."""
        trace_id, parent_id = parent if parent is not None else (secrets.token_hex(16), "")
        data = SpanData(name, trace_id, secrets.token_hex(8), parent_id, kind, time.time_ns())
        span = NativeSpan(data, self.export.add_span)
        span.set_attributes(attributes)
        return span

    def start_span(self, name: str, local: bool, attributes: Mapping[str, Any]) -> NativeSpan:
        kind = KIND_INTERNAL if local else KIND_CLIENT
        return self._span(name, kind, attributes, _current_ids())

    def inside_operation(self) -> bool:
        current = _current.get()
        return current is not None and current[1]

    @contextmanager
    def operation_context(self, span: NativeSpan) -> Iterator[None]:
        token = _current.set((span, True))
        try:
            yield
        finally:
            _current.reset(token)

    def set_error(self, span: NativeSpan, description: str, error: BaseException | None) -> None:
        if span.data.end_ns:
            return
        span.data.status_code = STATUS_ERROR
        span.data.status_message = description
        if error is not None:
            # The conventions' exception event, as the SDK's record_exception writes it.
            stack = "".join(traceback.format_exception(error))
            attributes = {
                "exception.type": type(error).__name__,
                "exception.message": str(error),
                "exception.stacktrace": stack,
            }
            span.data.events.append(("exception", time.time_ns(), attributes))

    def record(self, measurements: Sequence[Measurement]) -> None:
        self.export.metrics.record(measurements)

    @contextmanager
    def serve(
        self, method: str, route: str, path: str, headers: Mapping[str, str]
    ) -> Iterator[NativeSpan]:
        """A SERVER span for one HTTP request (see :meth:`Telemetry.serve`); its parent is the
        request's W3C ``traceparent`` (header names lowercase), when valid."""
        parent = parse_traceparent(headers.get("traceparent"))
        attributes = {HTTP_METHOD: method, HTTP_ROUTE: route, URL_PATH: path}
        span = self._span(f"{method} {route}", KIND_SERVER, attributes, parent)
        with self._current(span):
            yield span

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[NativeSpan]:
        span = self._span(name, KIND_INTERNAL, attributes, _current_ids())
        with self._current(span):
            yield span

    def start_internal(
        self, name: str, attributes: Mapping[str, Any], parent: NativeSpan | None
    ) -> NativeSpan:
        ids = _current_ids() if parent is None else (parent.data.trace_id, parent.data.span_id)
        return self._span(name, KIND_INTERNAL, attributes, ids)

    @contextmanager
    def span_context(self, span: NativeSpan) -> Iterator[None]:
        token = _current.set((span, False))
        try:
            yield
        finally:
            _current.reset(token)

    @contextmanager
    def _current(self, span: NativeSpan) -> Iterator[None]:
        """``span`` current (not as an operation's) inside the block; it ends after it."""
        token = _current.set((span, False))
        try:
            yield
        except BaseException as err:
            self.set_error(span, type(err).__name__, err)
            raise
        finally:
            _current.reset(token)
            span.end()

    def shutdown(self) -> None:
        if self._on_shutdown is not None:
            self._on_shutdown()
