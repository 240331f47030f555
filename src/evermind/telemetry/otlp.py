"""Exporting the GenAI telemetry over OTLP/HTTP: the SDK's protobuf, else our JSON (native-only).

:func:`configure` is what ``evermind serve --otlp-endpoint URL`` (or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` variable) turns on, posting to ``<URL>/v1/traces`` and
``<URL>/v1/metrics``:

- with the OpenTelemetry SDK installed (the ``telemetry`` extra, ``pip install
  'evermind-memory[telemetry]'``): an SDK ``TracerProvider`` with a batch span processor and a
  ``MeterProvider`` with a periodic reader, exporting protobuf, installed with
  :func:`evermind.telemetry.otel.install`; the SDK is imported only here, only then;
- without it, or with ``OTEL_EXPORTER_OTLP_PROTOCOL=http/json``: :func:`configure_json`,
  the standard library's :class:`~evermind.telemetry.tracing.NativeTelemetry` with
  :class:`JsonPoster` posting OTLP JSON (:mod:`evermind.telemetry.otlp_json`) from a thread.

The SDK's variables keep working: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``
(the resource), ``OTEL_BSP_SCHEDULE_DELAY`` (ms between span batches, default 5000),
``OTEL_METRIC_EXPORT_INTERVAL`` (ms between metric exports, default 60000),
``OTEL_EXPORTER_OTLP_HEADERS``; with the SDK also ``_COMPRESSION`` / ``_TIMEOUT``; without
``--otlp-endpoint`` the per-signal ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``_METRICS_ENDPOINT``
too. ``OTEL_SDK_DISABLED=true`` keeps telemetry off whatever else is set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.request
from collections.abc import Mapping
from urllib.parse import unquote

from evermind import __version__
from evermind.errors import ConfigError
from evermind.telemetry.genai import Telemetry, activate
from evermind.telemetry.otel import install
from evermind.telemetry.otlp_json import (
    CONTENT_TYPE,
    METRICS_PATH,
    TRACES_PATH,
    JsonExport,
    check_endpoint,
)
from evermind.telemetry.tracing import NativeTelemetry

logger = logging.getLogger(__name__)

#: The standard variable naming the collector's base URL.
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
DISABLED_ENV = "OTEL_SDK_DISABLED"
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_PROTOCOL"
HEADERS_ENV = "OTEL_EXPORTER_OTLP_HEADERS"
DEFAULT_SERVICE = "evermind-runtime"
#: Seconds one export may take (the SDK's default is 10): a dead collector must not hold a
#: shutting-down server for long.
EXPORT_TIMEOUT_S = 5.0


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

    Protobuf through the OpenTelemetry SDK when it is installed; JSON through
    :func:`configure_json` (the standard library) when it is not, or when
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` is ``http/json``.

    Args:
        endpoint: The collector's base URL (``http://host:4318``); None: the environment.
        service_name: ``service.name`` of the resource unless ``OTEL_SERVICE_NAME`` says.

    Raises:
        ConfigError: A malformed endpoint or setting, or a protocol other than OTLP/HTTP.
    """
    enabled, base = wanted_endpoint(endpoint)
    if not enabled:
        return None
    protocol = os.environ.get(PROTOCOL_ENV, "").strip().lower() or "http/protobuf"
    if protocol not in ("http/protobuf", "http/json"):
        raise ConfigError(
            f"{PROTOCOL_ENV}={protocol!r}: evermind exports OTLP over HTTP only; expected "
            "http/protobuf or http/json (the collector's port 4318, not gRPC's 4317)"
        )
    if protocol == "http/json":
        return configure_json(base, service_name)
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as err:
        logger.info("telemetry: no OpenTelemetry SDK (%s); exporting OTLP/HTTP JSON", err)
        return configure_json(base, service_name)
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


def configure_json(
    base: str | None, service_name: str = DEFAULT_SERVICE, environ: Mapping[str, str] | None = None
) -> NativeTelemetry:
    """Installs OTLP/HTTP JSON export with the standard library (no SDK needed).

    Spans are posted every ``OTEL_BSP_SCHEDULE_DELAY`` ms and the metrics every
    ``OTEL_METRIC_EXPORT_INTERVAL`` ms from one daemon thread; ``shutdown`` posts what is left.

    Args:
        base: The collector's base URL; None: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the
            per-signal ``..._TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT``, full URLs).
        service_name: ``service.name`` unless ``OTEL_SERVICE_NAME`` or
            ``OTEL_RESOURCE_ATTRIBUTES`` says.
        environ: The variables to read (default ``os.environ``).

    Raises:
        ConfigError: A malformed endpoint, header list or interval.
    """
    env = os.environ if environ is None else environ
    urls = []
    for signal, path in (("TRACES", TRACES_PATH), ("METRICS", METRICS_PATH)):
        if base is not None:
            urls.append(base + path)
            continue
        own = env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "").strip()
        urls.append(check_endpoint(own) if own else check_endpoint(env[ENDPOINT_ENV]) + path)
    export = JsonExport(resource_attributes(service_name, env))
    poster = JsonPoster(
        export,
        traces_url=urls[0],
        metrics_url=urls[1],
        headers=parse_headers(env.get(HEADERS_ENV, "")),
        span_delay_s=_milliseconds(env, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
        metric_interval_s=_milliseconds(env, "OTEL_METRIC_EXPORT_INTERVAL", 60000) / 1000,
    )
    telemetry = NativeTelemetry(export, on_shutdown=poster.close)
    poster.start()
    activate(telemetry)
    return telemetry


def resource_attributes(service_name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The resource: ``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,...``, percent-encoded values), then
    ``service.name`` (``OTEL_SERVICE_NAME`` first) and the ``telemetry.sdk.*`` of this code."""
    attributes = parse_headers(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""), "resource attribute")
    named = environ.get("OTEL_SERVICE_NAME", "").strip()
    if named:
        attributes["service.name"] = named
    attributes.setdefault("service.name", service_name)
    attributes["telemetry.sdk.language"] = "python"
    attributes["telemetry.sdk.name"] = "evermind"
    attributes["telemetry.sdk.version"] = __version__
    return attributes


def parse_headers(text: str, what: str = "header") -> dict[str, str]:
    """``k1=v1,k2=v2`` (the OTLP variables' form; values percent-decoded) as a dict.

    Raises:
        ConfigError: An item without ``=`` or with an empty key.
    """
    found: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"OTLP {what} {item.strip()!r}: expected key=value")
        found[unquote(key.strip())] = unquote(value.strip())
    return found


def _milliseconds(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) == 0:
        raise ConfigError(f"{name}={text!r}: expected a positive whole number of milliseconds")
    return int(text)


class JsonPoster:
    """Posts a :class:`JsonExport`'s bodies from one daemon thread (native).

    A failed post is logged and its spans are lost (as the SDK's exporter does after its
    retries): export never holds a request or grows without bound.
    """

    def __init__(
        self,
        export: JsonExport,
        *,
        traces_url: str,
        metrics_url: str,
        headers: Mapping[str, str],
        span_delay_s: float,
        metric_interval_s: float,
        timeout_s: float = EXPORT_TIMEOUT_S,
    ) -> None:
        self.export = export
        self.traces_url = traces_url
        self.metrics_url = metrics_url
        self.headers = {**headers, "Content-Type": CONTENT_TYPE}
        self.span_delay_s = span_delay_s
        self.metric_interval_s = metric_interval_s
        self.timeout_s = timeout_s
        self.posted = 0
        self.failed = 0
        self._dropped_logged = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evermind-otlp-json", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_metrics = time.monotonic() + self.metric_interval_s
        while not self._stop.wait(self.span_delay_s):
            try:
                self.flush_spans()
                if time.monotonic() >= next_metrics:
                    next_metrics = time.monotonic() + self.metric_interval_s
                    self.flush_metrics()
            except Exception:  # a bug must not end the export for the process's lifetime
                logger.exception("telemetry: OTLP/HTTP JSON export failed")

    def flush_spans(self) -> None:
        """Posts every waiting span (in batches)."""
        while (body := self.export.trace_body()) is not None:
            self._post(self.traces_url, body)
        dropped = self.export.dropped
        if dropped > self._dropped_logged:
            logger.warning("telemetry: %d spans dropped (export queue full)", dropped)
            self._dropped_logged = dropped

    def flush_metrics(self) -> None:
        """Posts the cumulative metrics, if any were recorded."""
        body = self.export.metrics_body()
        if body is not None:
            self._post(self.metrics_url, body)

    def _post(self, url: str, body: bytes) -> None:
        request = urllib.request.Request(url, data=body, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                answer.read()
        except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors
            self.failed += 1
            log = logger.warning if self.failed == 1 else logger.debug
            log("telemetry: OTLP/HTTP JSON export to %s failed: %s", url, err)
            return
        self.posted += 1

    def close(self) -> None:
        """Stops the thread and posts what is left (each post waits at most ``timeout_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s + self.span_delay_s)
        self.flush_spans()
        self.flush_metrics()
