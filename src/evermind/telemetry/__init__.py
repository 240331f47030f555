"""OpenTelemetry traces and metrics of every model call, with the GenAI semantic conventions.

Off by default and browser-safe: nothing here imports OpenTelemetry. Telemetry is turned on
by :func:`install` (any OpenTelemetry providers: the SDK's in-memory exporter in tests), by
:func:`evermind.telemetry.otlp.configure` (OTLP/HTTP, what ``evermind serve --otlp-endpoint``
does: the SDK's protobuf, or OTLP JSON on the standard library when the SDK is absent), or in
the tab by :func:`evermind.telemetry.tab.enable`. The bridges and the runtime call
:func:`start_operation` on every call; while off it returns :data:`NOOP`. What is measured,
and under which names: docs/telemetry.md.
"""

from evermind.telemetry.genai import (
    NOOP,
    NOOP_SPAN,
    Operation,
    Span,
    Telemetry,
    activate,
    active,
    error_type,
    start_operation,
    start_span,
    uninstall,
)
from evermind.telemetry.otel import install

__all__ = [
    "NOOP",
    "NOOP_SPAN",
    "Operation",
    "Span",
    "Telemetry",
    "activate",
    "active",
    "error_type",
    "install",
    "start_operation",
    "start_span",
    "uninstall",
]
