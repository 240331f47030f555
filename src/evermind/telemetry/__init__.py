"""OpenTelemetry traces and metrics of every model call, with the GenAI semantic conventions.

Off by default and browser-safe: nothing here imports OpenTelemetry until telemetry is turned
on, by :func:`install` (any providers: the SDK's in-memory exporter in tests) or by
:func:`evermind.telemetry.otlp.configure` (OTLP/HTTP, what ``evermind serve --otlp-endpoint``
does). The bridges and the runtime call :func:`start_operation` on every call; while off it
returns :data:`NOOP`. What is measured, and under which names: docs/telemetry.md.
"""

from evermind.telemetry.genai import (
    NOOP,
    NOOP_SPAN,
    Operation,
    Span,
    Telemetry,
    active,
    error_type,
    install,
    start_operation,
    start_span,
    uninstall,
)

__all__ = [
    "NOOP",
    "NOOP_SPAN",
    "Operation",
    "Span",
    "Telemetry",
    "active",
    "error_type",
    "install",
    "start_operation",
    "start_span",
    "uninstall",
]
