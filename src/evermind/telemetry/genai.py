"""GenAI operations, the spans and metrics they record, off unless installed (browser-safe).

This module imports only the standard library: it holds the semantic conventions' names, the
:class:`Operation` the bridges and the runtime measure a call with, the :class:`Telemetry`
backend interface and the one derivation of the metrics from a finished operation's span
(:func:`operation_measurements`). Two backends record: :mod:`evermind.telemetry.otel` on the
OpenTelemetry API (its ``install``, with any providers: the SDK's in tests and for OTLP
protobuf) and :mod:`evermind.telemetry.tracing` on the standard library (the OTLP/HTTP JSON
export natively without the SDK, and in the tab). Until one is activated
:func:`start_operation` returns :data:`NOOP`, whose methods do nothing, so a bridge pays one
global lookup per call.

One *operation* is one call to a model, as the OpenTelemetry GenAI semantic conventions see
it (``gen_ai.*``: the span ``{operation} {model}``, kind CLIENT, or INTERNAL for a model in
this process). Operations nest: the caching bridge's ``chat`` span is the parent of the
instrumented bridge's on a miss. Only the outermost operation records the metrics
(``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
``gen_ai.client.operation.time_to_first_chunk``, ``evermind.client.cost``), derived from its
span's final attributes (the cache outcome, the tokens paid), so a call is counted once however
many layers measured it, and both backends count it alike.

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
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

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

    def current(self) -> AbstractContextManager[None]:
        """Makes this operation's span the parent of operations started inside the block."""
        return nullcontext()

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


class Measurement(NamedTuple):
    """One value for one instrument (a metric name of :data:`INSTRUMENTS`), with its labels."""

    instrument: str
    value: float
    attributes: dict[str, Any]


class Instrument(NamedTuple):
    """How a metric is declared: ``histogram`` (with bucket boundaries) or ``counter``."""

    kind: str
    unit: str
    description: str
    buckets: tuple[float, ...] = ()


#: Every metric an operation records, by name: what both exporters declare.
INSTRUMENTS: dict[str, Instrument] = {
    TOKEN_USAGE: Instrument(
        "histogram", "{token}", "Number of input and output tokens used.", TOKEN_BUCKETS
    ),
    OPERATION_DURATION: Instrument("histogram", "s", "GenAI operation duration.", DURATION_BUCKETS),
    TIME_TO_FIRST_CHUNK: Instrument(
        "histogram",
        "s",
        "Time to receive the first chunk of a streamed response.",
        DURATION_BUCKETS,
    ),
    COST: Instrument("counter", "USD", "Dollars paid for GenAI operations (priced calls)."),
}


def operation_measurements(
    attributes: Mapping[str, Any], duration_s: float, first_chunk_s: float | None = None
) -> list[Measurement]:
    """The metrics of one finished outermost operation, derived from its span (the one source).

    Args:
        attributes: The span's final attributes (``error.type`` set: it failed).
        duration_s: Seconds from its start to its end.
        first_chunk_s: Seconds to the first chunk of a stream; None when not streamed.

    Returns:
        Its duration; and unless it failed, its time to first chunk, its billable tokens by
        ``gen_ai.token.type`` (a cache hit used none: nothing to record) and its cost.
    """
    labels = {key: attributes[key] for key in METRIC_KEYS if key in attributes}
    found = [Measurement(OPERATION_DURATION, duration_s, labels)]
    if ERROR_TYPE in attributes:
        return found
    if first_chunk_s is not None:
        found.append(Measurement(TIME_TO_FIRST_CHUNK, first_chunk_s, labels))
    for kind, key in (("input", USAGE_INPUT_TOKENS), ("output", USAGE_OUTPUT_TOKENS)):
        count = attributes.get(key)
        if count:
            found.append(Measurement(TOKEN_USAGE, count, {**labels, TOKEN_TYPE: kind}))
    cost = attributes.get(COST_USD)
    if cost:
        found.append(Measurement(COST, cost, labels))
    return found


class Telemetry:
    """Where operations are recorded: spans and the metrics derived from them.

    Two backends implement the hooks: :class:`evermind.telemetry.otel.OtelTelemetry` on the
    OpenTelemetry API (any providers, the SDK's in tests and for OTLP protobuf) and
    :class:`evermind.telemetry.tracing.NativeTelemetry` (the standard library only: the OTLP
    JSON export, natively without the SDK and in the tab). A span object of either has
    ``set_attribute``, ``set_attributes`` and ``end``.
    """

    def start(
        self, operation: str, provider: str, model: str, attributes: Attributes, local: bool
    ) -> Operation:
        """A started operation (its span's parent: the current span, if any)."""
        base: dict[str, Any] = {OPERATION_NAME: operation, PROVIDER_NAME: provider}
        base[SYSTEM] = provider
        if model:
            base[REQUEST_MODEL] = model
        merged = {**base, **attributes}
        span = self.start_span(f"{operation} {model}".strip(), local, merged)
        return _Live(self, span, merged, self.inside_operation())

    def start_span(self, name: str, local: bool, attributes: Mapping[str, Any]) -> Any:
        """A started span (kind INTERNAL when ``local``, else CLIENT), child of the current."""
        raise NotImplementedError

    def inside_operation(self) -> bool:
        """Whether the current context is inside an operation (a nested one skips metrics)."""
        raise NotImplementedError

    def operation_context(self, span: Any) -> AbstractContextManager[None]:
        """Makes ``span`` current, marked as an operation's, inside the block."""
        raise NotImplementedError

    def set_error(self, span: Any, description: str, error: BaseException | None) -> None:
        """Marks ``span`` failed (status ERROR), recording ``error`` as an exception event."""
        raise NotImplementedError

    def record(self, measurements: Sequence[Measurement]) -> None:
        """Adds an operation's measurements to the metrics."""
        raise NotImplementedError

    def serve(
        self, method: str, route: str, path: str, headers: Mapping[str, str]
    ) -> AbstractContextManager[Any]:
        """A SERVER span for one HTTP request, current inside the block; yields the span.

        Its parent is the trace context the request carries (a W3C ``traceparent``), else
        none (a new trace). The caller sets ``http.response.status_code`` with
        :meth:`finish_server`; the span ends with the block.
        """
        raise NotImplementedError

    def span(self, name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[Any]:
        """An INTERNAL span (not a GenAI operation: one step of an app, a Studio call),
        current inside the block, ended after it; an exception out of the block marks it
        failed. Yields the span."""
        raise NotImplementedError

    def start_internal(self, name: str, attributes: Mapping[str, Any], parent: Any) -> Any:
        """A started INTERNAL span under ``parent`` (a span of this backend), or under the
        current span when ``parent`` is None; not made current (:meth:`span_context`)."""
        raise NotImplementedError

    def span_context(self, span: Any) -> AbstractContextManager[None]:
        """Makes ``span`` current (not as an operation's) inside the block; it does not end."""
        raise NotImplementedError

    def finish_server(self, span: Any, status: int) -> None:
        """Records the response status on a :meth:`serve` span (5xx marks it an error, as the
        HTTP conventions ask of a server; a 4xx is the client's error, not the server's)."""
        span.set_attribute(HTTP_STATUS, status)
        if status >= 500:
            span.set_attribute(ERROR_TYPE, str(status))
            self.set_error(span, "", None)

    def shutdown(self) -> None:
        """Flushes what is buffered and stops exporting."""


class _Live(Operation):
    """An operation with a real span."""

    recording = True

    def __init__(self, telemetry: Telemetry, span: Any, attributes: Attributes, nested: bool):
        self._telemetry = telemetry
        self._span = span
        self._attributes: dict[str, Any] = dict(attributes)
        self._nested = nested
        self._start = time.perf_counter()
        self._first: float | None = None
        self._ended = False

    def current(self) -> AbstractContextManager[None]:
        return self._telemetry.operation_context(self._span)

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))
        self._attributes.update(attributes)

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
        self._end()

    def fail(self, error: BaseException | str) -> None:
        if self._ended:
            return
        self._ended = True
        self.set({ERROR_TYPE: error_type(error)})
        cause = error if isinstance(error, BaseException) else None
        self._telemetry.set_error(self._span, str(error)[:200], cause)
        self._end()

    def _end(self) -> None:
        """Ends the span; the outermost operation records the metrics derived from it."""
        self._span.end()
        if not self._nested:
            elapsed = time.perf_counter() - self._start
            self._telemetry.record(operation_measurements(self._attributes, elapsed, self._first))


class Span:
    """A plain span (not a model call: an agent run, one node of a graph); this base class
    records nothing (:data:`NOOP_SPAN`). Call :meth:`end` once; later calls are ignored."""

    recording = False

    def current(self) -> AbstractContextManager[None]:
        """Makes this span the parent of spans and operations started inside the block."""
        return nullcontext()

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

    def current(self) -> AbstractContextManager[None]:
        return self._telemetry.span_context(self._span)

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))

    def end(self, error: BaseException | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if error is not None:
            self._span.set_attribute(ERROR_TYPE, error_type(error))
            self._telemetry.set_error(self._span, str(error)[:200], error)
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
    under = parent._span if isinstance(parent, _LiveSpan) else None
    return _LiveSpan(telemetry, telemetry.start_internal(name, dict(attributes or {}), under))


_active: Telemetry | None = None


def activate(telemetry: Telemetry) -> Telemetry:
    """Turns telemetry on for this process with this backend (replacing any before)."""
    global _active
    _active = telemetry
    return telemetry


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
