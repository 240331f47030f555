"""The telemetry backend on the OpenTelemetry API: any tracer and meter providers.

:func:`install` builds it from providers (the SDK's in-memory
exporter in tests; the SDK with the OTLP protobuf exporters in
:func:`evermind.telemetry.otlp.configure`). OpenTelemetry is imported when one is built, never
at load time, so the module itself is browser-safe (the tab uses
:mod:`evermind.telemetry.tracing` instead).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from evermind.telemetry.genai import (
    HTTP_METHOD,
    HTTP_ROUTE,
    INSTRUMENTATION,
    INSTRUMENTS,
    SCHEMA_URL,
    URL_PATH,
    Measurement,
    Telemetry,
    activate,
)


class OtelTelemetry(Telemetry):
    """Tracer and instruments from OpenTelemetry providers (SDK or any API implementation).

    Args:
        tracer_provider: An ``opentelemetry.trace.TracerProvider``.
        meter_provider: An ``opentelemetry.metrics.MeterProvider``.
    """

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from opentelemetry import context, trace

        self.context_api = context
        self.trace_api = trace
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = tracer_provider.get_tracer(INSTRUMENTATION, schema_url=SCHEMA_URL)
        meter = meter_provider.get_meter(INSTRUMENTATION, schema_url=SCHEMA_URL)
        self.instruments: dict[str, Any] = {}
        for name, spec in INSTRUMENTS.items():
            if spec.kind == "histogram":
                self.instruments[name] = meter.create_histogram(
                    name,
                    unit=spec.unit,
                    description=spec.description,
                    explicit_bucket_boundaries_advisory=list(spec.buckets),
                ).record
            else:
                self.instruments[name] = meter.create_counter(
                    name, unit=spec.unit, description=spec.description
                ).add
        #: The context key that marks "inside a GenAI operation" (nested ones skip metrics).
        self.inside = context.create_key("evermind-genai-operation")

    def start_span(self, name: str, local: bool, attributes: Mapping[str, Any]) -> Any:
        kinds = self.trace_api.SpanKind
        kind = kinds.INTERNAL if local else kinds.CLIENT
        return self.tracer.start_span(name, kind=kind, attributes=dict(attributes))

    def inside_operation(self) -> bool:
        return self.context_api.get_value(self.inside) is True

    @contextmanager
    def operation_context(self, span: Any) -> Iterator[None]:
        context = self.context_api
        parent = self.trace_api.set_span_in_context(span)
        token = context.attach(context.set_value(self.inside, True, parent))
        try:
            yield
        finally:
            context.detach(token)

    def set_error(self, span: Any, description: str, error: BaseException | None) -> None:
        if error is not None:
            span.record_exception(error)
        status = self.trace_api.Status(self.trace_api.StatusCode.ERROR, description or None)
        span.set_status(status)

    def record(self, measurements: Sequence[Measurement]) -> None:
        for measurement in measurements:
            self.instruments[measurement.instrument](measurement.value, measurement.attributes)

    @contextmanager
    def serve(
        self, method: str, route: str, path: str, headers: Mapping[str, str]
    ) -> Iterator[Any]:
        """A SERVER span for one HTTP request (see :meth:`Telemetry.serve`); the parent is read
        by the global propagator: W3C trace context unless ``OTEL_PROPAGATORS`` says otherwise.
        """
        from opentelemetry import propagate

        parent = propagate.extract(dict(headers))
        span = self.tracer.start_span(
            f"{method} {route}",
            context=parent,
            kind=self.trace_api.SpanKind.SERVER,
            attributes={HTTP_METHOD: method, HTTP_ROUTE: route, URL_PATH: path},
        )
        with self._current(span, self.trace_api.set_span_in_context(span, parent)):
            yield span

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
        kind = self.trace_api.SpanKind.INTERNAL
        span = self.tracer.start_span(name, kind=kind, attributes=dict(attributes))
        with self._current(span, self.trace_api.set_span_in_context(span)):
            yield span

    def start_internal(self, name: str, attributes: Mapping[str, Any], parent: Any) -> Any:
        context = None if parent is None else self.trace_api.set_span_in_context(parent)
        kind = self.trace_api.SpanKind.INTERNAL
        return self.tracer.start_span(name, context=context, kind=kind, attributes=dict(attributes))

    @contextmanager
    def span_context(self, span: Any) -> Iterator[None]:
        token = self.context_api.attach(self.trace_api.set_span_in_context(span))
        try:
            yield
        finally:
            self.context_api.detach(token)

    @contextmanager
    def _current(self, span: Any, context: Any) -> Iterator[None]:
        """``context`` (holding ``span``) attached inside the block; the span ends after it."""
        token = self.context_api.attach(context)
        try:
            yield
        except BaseException as err:
            self.set_error(span, type(err).__name__, err)
            raise
        finally:
            self.context_api.detach(token)
            span.end()

    def shutdown(self) -> None:
        """Flushes and stops both providers (what they export is sent now)."""
        for provider in (self.tracer_provider, self.meter_provider):
            stop = getattr(provider, "shutdown", None)
            if stop is not None:
                stop()


def install(tracer_provider: Any, meter_provider: Any) -> Telemetry:
    """Turns telemetry on for this process with these OpenTelemetry providers.

    The SDK's in-memory exporter and reader make this the test set-up; the OTLP set-up is
    :func:`evermind.telemetry.otlp.configure`.
    """
    return activate(OtelTelemetry(tracer_provider, meter_provider))
