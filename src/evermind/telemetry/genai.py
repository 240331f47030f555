"""GenAI spans and metrics on the OpenTelemetry API, off unless installed (browser-safe).

This module imports only the standard library at load time: the OpenTelemetry API is touched
by :class:`Telemetry` alone, which a caller builds from its providers (``install``) or the
OTLP setup builds (:mod:`evermind.telemetry.otlp`). Until then :func:`start_operation` returns
:data:`NOOP`, whose methods do nothing, so a bridge pays one global lookup per call.

One *operation* is one call to a model, as the OpenTelemetry GenAI semantic conventions see
it (``gen_ai.*``: the span ``{operation} {model}``, kind CLIENT, or INTERNAL for a model in
this process). Operations nest: the caching bridge's ``chat`` span is the parent of the
instrumented bridge's on a miss. Only the outermost operation records the metrics
(``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
``gen_ai.client.operation.time_to_first_chunk``, ``evermind.client.cost``), with what it
finally knew (the cache outcome, the tokens paid), so a call is counted once however many
layers measured it.

The runtime also opens one SERVER span per HTTP request (:meth:`Telemetry.serve`,
``{method} {route}`` with the HTTP semantic conventions' ``http.*`` attributes), continuing
the caller's trace when the request carries a W3C ``traceparent``: the GenAI operations of
that request are its children, so a client's trace runs through the gateway to the upstream.

A span is never made current across an ``await`` the caller does not control:
:meth:`Operation.current` attaches it around one step (a ``generate``, one ``anext`` of a
stream) and detaches it after, so an async generator never leaks its span to its consumer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

#: Attribute names of the GenAI semantic conventions (v1.37+ names; ``gen_ai.system`` is
#: the older name of ``gen_ai.provider.name``, sent too for backends that still group by it).
OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"
#: Ours: what the call cost (US dollars, from the price table) and how the cache served it.
COST_USD = "evermind.cost_usd"
CACHE_HIT = "evermind.cache.hit"
CACHE_STATUS = "evermind.cache.status"
CACHE_REASON = "evermind.cache.reason"
CACHE_TIER = "evermind.cache.tier"
CACHE_SCORE = "evermind.cache.score"
CACHE_SAVED_USD = "evermind.cache.saved_usd"
CACHE_SAVED_INPUT = "evermind.cache.saved.input_tokens"
CACHE_SAVED_OUTPUT = "evermind.cache.saved.output_tokens"

#: The HTTP semantic conventions' attributes of the runtime's SERVER spans.
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_PATH = "url.path"

TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
COST = "evermind.client.cost"
#: The conventions' advised bucket boundaries (tokens: powers of 4; seconds: doubling).
TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))
DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))

#: Attributes metrics keep (low cardinality); a span carries all of them.
METRIC_KEYS = (OPERATION_NAME, PROVIDER_NAME, REQUEST_MODEL, RESPONSE_MODEL, ERROR_TYPE, CACHE_HIT)
INSTRUMENTATION = "evermind"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"

Attributes = Mapping[str, str | bool | int | float | Sequence[str]]


class Operation:
    """One GenAI operation being measured; this base class measures nothing (:data:`NOOP`).

    Call :meth:`finish` or :meth:`fail` once; later calls are ignored, so a ``finally`` may
    fail an operation that already finished.
    """

    recording = False

    @contextmanager
    def current(self) -> Iterator[None]:
        """Makes this operation's span the parent of operations started inside the block."""
        yield

    def set(self, attributes: Attributes) -> None:
        """Adds attributes to the span (and to the metrics, for those in ``METRIC_KEYS``)."""

    def first_chunk(self) -> None:
        """Notes that the first chunk of a stream arrived now."""

    def finish(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        attributes: Attributes | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """Ends the operation successfully.

        Args:
            input_tokens: Billable prompt tokens (cached ones included); None: not known.
            output_tokens: Billable output tokens; None: not known.
            attributes: Response attributes (``gen_ai.response.*``, usage details, cache).
            cost_usd: The call's price (None: not priced).
        """

    def fail(self, error: BaseException | str) -> None:
        """Ends the operation with ``error`` (its ``code``, or its class name) as ``error.type``."""


#: The operation returned while telemetry is off.
NOOP = Operation()


def error_type(error: BaseException | str) -> str:
    """``error.type`` of a failure: a domain error's ``code``, else the exception's class."""
    if isinstance(error, str):
        return error
    code = getattr(error, "code", "")
    return code if isinstance(code, str) and code else type(error).__name__


class Telemetry:
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
        self.token_usage = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self.duration = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.time_to_first_chunk = meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk of a streamed response.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.cost = meter.create_counter(
            COST, unit="USD", description="Dollars paid for GenAI operations (priced calls)."
        )
        #: The context key that marks "inside a GenAI operation" (nested ones skip metrics).
        self.inside = context.create_key("evermind-genai-operation")

    def start(
        self, operation: str, provider: str, model: str, attributes: Attributes, local: bool
    ) -> Operation:
        """A started operation (its span's parent: the current span, if any)."""
        kind = self.trace_api.SpanKind.INTERNAL if local else self.trace_api.SpanKind.CLIENT
        base = {OPERATION_NAME: operation, PROVIDER_NAME: provider, SYSTEM: provider}
        if model:
            base[REQUEST_MODEL] = model
        span = self.tracer.start_span(
            f"{operation} {model}".strip(), kind=kind, attributes={**base, **attributes}
        )
        nested = self.context_api.get_value(self.inside) is True
        return _Live(self, span, {**base, **attributes}, nested)

    @contextmanager
    def serve(
        self, method: str, route: str, path: str, headers: Mapping[str, str]
    ) -> Iterator[Any]:
        """A SERVER span for one HTTP request, current inside the block; yields the span.

        Its parent is the trace context the request carries (``traceparent`` /
        ``tracestate``, read by the global propagator: W3C trace context unless
        ``OTEL_PROPAGATORS`` says otherwise), else none (a new trace). The caller sets
        ``http.response.status_code`` with :func:`finish_server`; the span ends with the block.
        """
        from opentelemetry import propagate

        parent = propagate.extract(dict(headers))
        span = self.tracer.start_span(
            f"{method} {route}",
            context=parent,
            kind=self.trace_api.SpanKind.SERVER,
            attributes={HTTP_METHOD: method, HTTP_ROUTE: route, URL_PATH: path},
        )
        token = self.context_api.attach(self.trace_api.set_span_in_context(span, parent))
        try:
            yield span
        except BaseException as err:
            span.record_exception(err)
            span.set_status(
                self.trace_api.Status(self.trace_api.StatusCode.ERROR, type(err).__name__)
            )
            raise
        finally:
            self.context_api.detach(token)
            span.end()

    def finish_server(self, span: Any, status: int) -> None:
        """Records the response status on a :meth:`serve` span (5xx marks it an error, as the
        HTTP conventions ask of a server; a 4xx is the client's error, not the server's)."""
        span.set_attribute(HTTP_STATUS, status)
        if status >= 500:
            span.set_attribute(ERROR_TYPE, str(status))
            span.set_status(self.trace_api.Status(self.trace_api.StatusCode.ERROR))

    def shutdown(self) -> None:
        """Flushes and stops both providers (what they export is sent now)."""
        for provider in (self.tracer_provider, self.meter_provider):
            stop = getattr(provider, "shutdown", None)
            if stop is not None:
                stop()


class _Live(Operation):
    """An operation with a real span."""

    recording = True

    def __init__(self, telemetry: Telemetry, span: Any, attributes: Attributes, nested: bool):
        self._telemetry = telemetry
        self._span = span
        self._metric_attributes = {k: v for k, v in attributes.items() if k in METRIC_KEYS}
        self._nested = nested
        self._start = time.perf_counter()
        self._first: float | None = None
        self._ended = False

    @contextmanager
    def current(self) -> Iterator[None]:
        context, trace = self._telemetry.context_api, self._telemetry.trace_api
        parent = trace.set_span_in_context(self._span)
        token = context.attach(context.set_value(self._telemetry.inside, True, parent))
        try:
            yield
        finally:
            context.detach(token)

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))
        self._metric_attributes.update({k: v for k, v in attributes.items() if k in METRIC_KEYS})

    def first_chunk(self) -> None:
        if self._first is None:
            self._first = time.perf_counter() - self._start

    def finish(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        attributes: Attributes | None = None,
        cost_usd: float | None = None,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        done: dict[str, Any] = dict(attributes or {})
        if input_tokens is not None:
            done[USAGE_INPUT_TOKENS] = input_tokens
        if output_tokens is not None:
            done[USAGE_OUTPUT_TOKENS] = output_tokens
        if cost_usd is not None:
            done[COST_USD] = cost_usd
        self.set(done)
        self._span.end()
        if self._nested:
            return
        labels = dict(self._metric_attributes)
        telemetry = self._telemetry
        telemetry.duration.record(time.perf_counter() - self._start, labels)
        if self._first is not None:
            telemetry.time_to_first_chunk.record(self._first, labels)
        for kind, count in (("input", input_tokens), ("output", output_tokens)):
            if count:  # a cache hit used (and was billed) no tokens: nothing to record
                telemetry.token_usage.record(count, {**labels, TOKEN_TYPE: kind})
        if cost_usd:
            telemetry.cost.add(cost_usd, labels)

    def fail(self, error: BaseException | str) -> None:
        if self._ended:
            return
        self._ended = True
        kind = error_type(error)
        self.set({ERROR_TYPE: kind})
        trace = self._telemetry.trace_api
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:200]))
        if isinstance(error, BaseException):
            self._span.record_exception(error)
        self._span.end()
        if not self._nested:
            elapsed = time.perf_counter() - self._start
            self._telemetry.duration.record(elapsed, dict(self._metric_attributes))


class Span:
    """A plain span (not a model call: an agent run, one node of a graph); this base class
    records nothing (:data:`NOOP_SPAN`). Call :meth:`end` once; later calls are ignored."""

    recording = False

    @contextmanager
    def current(self) -> Iterator[None]:
        """Makes this span the parent of spans and operations started inside the block."""
        yield

    def set(self, attributes: Attributes) -> None:
        """Adds attributes to the span."""

    def end(self, error: BaseException | None = None) -> None:
        """Ends the span; with ``error``, marked failed (its ``error.type`` and the exception)."""


#: The span returned while telemetry is off.
NOOP_SPAN = Span()


class _LiveSpan(Span):
    recording = True

    def __init__(self, telemetry: Telemetry, span: Any) -> None:
        self._telemetry = telemetry
        self._span = span
        self._ended = False

    @contextmanager
    def current(self) -> Iterator[None]:
        context, trace = self._telemetry.context_api, self._telemetry.trace_api
        token = context.attach(trace.set_span_in_context(self._span))
        try:
            yield
        finally:
            context.detach(token)

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))

    def end(self, error: BaseException | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if error is not None:
            trace = self._telemetry.trace_api
            self._span.set_attribute(ERROR_TYPE, error_type(error))
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:200]))
            self._span.record_exception(error)
        self._span.end()


def start_span(name: str, attributes: Attributes | None = None, parent: Span | None = None) -> Span:
    """Starts an INTERNAL span (:data:`NOOP_SPAN` while telemetry is off); not made current.

    Args:
        name: The span's name (``invoke_agent {graph}``, ``node {name}``).
        attributes: Its attributes.
        parent: Its parent (default: the current span, if any).
    """
    telemetry = _active
    if telemetry is None:
        return NOOP_SPAN
    context = None
    if isinstance(parent, _LiveSpan):
        context = telemetry.trace_api.set_span_in_context(parent._span)
    span = telemetry.tracer.start_span(
        name,
        context=context,
        kind=telemetry.trace_api.SpanKind.INTERNAL,
        attributes=dict(attributes or {}),
    )
    return _LiveSpan(telemetry, span)


_active: Telemetry | None = None


def install(tracer_provider: Any, meter_provider: Any) -> Telemetry:
    """Turns telemetry on for this process with these providers (replacing any before).

    The SDK's in-memory exporter and reader make this the test set-up; the OTLP set-up is
    :func:`evermind.telemetry.otlp.configure`.
    """
    global _active
    _active = Telemetry(tracer_provider, meter_provider)
    return _active


def uninstall(telemetry: Telemetry | None = None) -> None:
    """Turns telemetry off (only if ``telemetry`` is the one on, when given); no flush."""
    global _active
    if telemetry is None or _active is telemetry:
        _active = None


def active() -> Telemetry | None:
    """The installed telemetry, or None when it is off."""
    return _active


def start_operation(
    operation: str,
    provider: str,
    model: str,
    attributes: Attributes | None = None,
    *,
    local: bool = False,
) -> Operation:
    """Starts measuring one GenAI operation (:data:`NOOP` while telemetry is off).

    Args:
        operation: ``gen_ai.operation.name``: ``chat``, ``text_completion``, ``embeddings``.
        provider: ``gen_ai.provider.name``: ``anthropic``, ``openai``, ``evermind``.
        model: ``gen_ai.request.model``: the model asked for.
        attributes: More request attributes (``gen_ai.request.max_tokens``, ...).
        local: The model runs in this process (span kind INTERNAL instead of CLIENT).
    """
    telemetry = _active
    if telemetry is None:
        return NOOP
    return telemetry.start(operation, provider, model, attributes or {}, local)
