"""Exporting the GenAI telemetry over OTLP/HTTP with the OpenTelemetry SDK (native-only).

:func:`configure` is what ``evermind serve --otlp-endpoint URL`` (or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` variable) turns on: an SDK ``TracerProvider`` with a batch
span processor and a ``MeterProvider`` with a periodic reader, both exporting protobuf over
HTTP to ``<URL>/v1/traces`` and ``<URL>/v1/metrics``, installed with
:func:`evermind.telemetry.genai.install`. The SDK and the exporter are the ``telemetry``
extra (``pip install 'evermind-memory[telemetry]'``) and are imported only here, only then.

The SDK's own variables keep working: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
(the resource), ``OTEL_BSP_SCHEDULE_DELAY`` (ms between span batches, default 5000),
``OTEL_METRIC_EXPORT_INTERVAL`` (ms between metric exports, default 60000),
``OTEL_EXPORTER_OTLP_HEADERS`` / ``_COMPRESSION`` / ``_TIMEOUT``; without ``--otlp-endpoint``
the per-signal ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``_METRICS_ENDPOINT`` too.
``OTEL_SDK_DISABLED=true`` keeps telemetry off whatever else is set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from evermind.errors import ConfigError
from evermind.telemetry.genai import Telemetry, install

#: The standard variable naming the collector's base URL.
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
DISABLED_ENV = "OTEL_SDK_DISABLED"
DEFAULT_SERVICE = "evermind-runtime"
#: Seconds one export may take (the SDK's default is 10): a dead collector must not hold a
#: shutting-down server for long.
EXPORT_TIMEOUT_S = 5.0


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


def wanted_endpoint(
    endpoint: str | None, environ: Mapping[str, str] | None = None
) -> tuple[bool, str | None]:
    """Whether to export, and the base URL to pass (None: the exporter reads the variables).

    ``endpoint`` (``--otlp-endpoint``) wins; else ``OTEL_EXPORTER_OTLP_ENDPOINT`` turns export
    on; ``OTEL_SDK_DISABLED=true`` turns it off.

    Raises:
        ConfigError: A malformed endpoint, given or in the environment.
    """
    env = os.environ if environ is None else environ
    if env.get(DISABLED_ENV, "").strip().lower() == "true":
        return False, None
    if endpoint:
        return True, check_endpoint(endpoint)
    from_env = env.get(ENDPOINT_ENV, "").strip()
    if from_env:
        check_endpoint(from_env)
        return True, None
    return False, None


def configure(endpoint: str | None, service_name: str = DEFAULT_SERVICE) -> Telemetry | None:
    """Installs OTLP/HTTP export of spans and metrics when asked for; None when not.

    Args:
        endpoint: The collector's base URL (``http://host:4318``); None: the environment.
        service_name: ``service.name`` of the resource unless ``OTEL_SERVICE_NAME`` says.

    Raises:
        ConfigError: A malformed endpoint, or the SDK is not installed.
    """
    enabled, base = wanted_endpoint(endpoint)
    if not enabled:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as err:
        raise ConfigError(
            f"OTLP export needs the OpenTelemetry SDK and exporter ({err}); hint: "
            "pip install 'evermind-memory[telemetry]'"
        ) from err
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    resource = Resource.create(attributes)
    traces = None if base is None else f"{base}/v1/traces"
    metrics = None if base is None else f"{base}/v1/metrics"
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=traces, timeout=EXPORT_TIMEOUT_S))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=metrics, timeout=EXPORT_TIMEOUT_S)
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    return install(tracer_provider, meter_provider)
