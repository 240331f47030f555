"""OTLP/HTTP JSON from the tab, posted with the page's ``fetch`` (browser-only).

Off unless :func:`enable` is given a collector URL: the tab is offline by design, and nothing
leaves it that the user did not point somewhere. Enabled, :class:`TabExporter` installs a
:class:`~evermind.telemetry.tracing.NativeTelemetry` (spans and the GenAI metrics derived
from them, :mod:`evermind.telemetry.otlp_json`) and posts its bodies to
``<collector>/v1/traces`` and ``/v1/metrics`` with ``pyodide.http.pyfetch`` (imported lazily,
on the first post, so the module imports anywhere). The Studio schedules a flush after each
call (:func:`schedule_flush`, never awaited by the call) and on request.

A collector on another origin than the page must allow it: ``application/json`` makes every
post a CORS request with a preflight (``OPTIONS``), so the collector's OTLP/HTTP receiver needs
the page's origin in its allowed origins (the OpenTelemetry Collector:
``receivers.otlp.protocols.http.cors.allowed_origins``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from evermind import __version__
from evermind.telemetry.genai import activate, uninstall
from evermind.telemetry.otlp_json import (
    CONTENT_TYPE,
    METRICS_PATH,
    TRACES_PATH,
    JsonExport,
    check_endpoint,
)
from evermind.telemetry.tracing import NativeTelemetry

logger = logging.getLogger(__name__)

DEFAULT_SERVICE = "evermind-studio"
#: Seconds a post may take before the flush gives up on it (fetch itself has no timeout).
POST_TIMEOUT_S = 10.0
#: Seconds between metric posts (they are cumulative: a late one loses nothing).
METRIC_INTERVAL_S = 30.0

#: ``post(url, body, headers) -> HTTP status``: how a body leaves (``fetch`` in the tab).
Post = Callable[[str, bytes, Mapping[str, str]], Awaitable[int]]


async def fetch_post(url: str, body: bytes, headers: Mapping[str, str]) -> int:
    """Posts ``body`` with the page's ``fetch``; returns the HTTP status."""
    from pyodide.http import pyfetch  # browser-only: lazily, so the module imports anywhere

    response = await pyfetch(url, method="POST", headers=dict(headers), body=body.decode())
    return int(response.status)


class TabExporter:
    """Spans and metrics of the tab, posted as OTLP JSON to one collector.

    Args:
        collector_url: The collector's OTLP/HTTP base URL (``http://host:4318``).
        service_name: ``service.name`` of the resource.
        headers: Extra request headers (a collector's API key).
        post: How a body is sent (default: ``fetch``).

    Raises:
        ConfigError: ``collector_url`` is not an ``http(s)://host[:port]`` URL.
    """

    def __init__(
        self,
        collector_url: str,
        service_name: str = DEFAULT_SERVICE,
        headers: Mapping[str, str] | None = None,
        post: Post = fetch_post,
    ) -> None:
        self.base = check_endpoint(collector_url)
        resource = {
            "service.name": service_name,
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "evermind",
            "telemetry.sdk.version": __version__,
        }
        self.export = JsonExport(resource)
        self.telemetry = NativeTelemetry(self.export)
        self.headers = {**(headers or {}), "Content-Type": CONTENT_TYPE}
        self.posted = 0
        self.failed = 0
        self.last_error = ""
        self._post = post
        self._next_metrics = 0.0
        self._flushing: asyncio.Task[dict[str, Any]] | None = None

    async def flush(self, metrics: bool = True) -> dict[str, Any]:
        """Posts every waiting span, and the metrics when ``metrics``; returns :meth:`status`.

        A failed post is counted and its spans are lost; nothing raises.
        """
        while (body := self.export.trace_body()) is not None:
            await self._send(self.base + TRACES_PATH, body)
        if metrics:
            self._next_metrics = time.monotonic() + METRIC_INTERVAL_S
            body = self.export.metrics_body()
            if body is not None:
                await self._send(self.base + METRICS_PATH, body)
        return self.status()

    async def _send(self, url: str, body: bytes) -> None:
        try:
            status = await asyncio.wait_for(self._post(url, body, self.headers), POST_TIMEOUT_S)
        except Exception as err:  # fetch rejects with a TypeError on a network or CORS failure
            self._failed(f"{url}: {type(err).__name__}: {err}")
            return
        if not 200 <= status < 300:
            self._failed(f"{url}: HTTP {status}")
            return
        self.posted += 1

    def _failed(self, why: str) -> None:
        self.failed += 1
        self.last_error = why
        log = logger.warning if self.failed == 1 else logger.debug
        log("telemetry: OTLP/HTTP JSON export failed: %s", why)

    def schedule_flush(self) -> None:
        """Starts a flush in the background when spans wait and none is running (the caller
        never waits for the network); the metrics go along every ``METRIC_INTERVAL_S``."""
        if self._flushing is not None and not self._flushing.done():
            return
        metrics_due = time.monotonic() >= self._next_metrics
        if not self.export.pending() and not metrics_due:
            return
        self._flushing = asyncio.get_running_loop().create_task(self.flush(metrics_due))

    def status(self) -> dict[str, Any]:
        """The collector, and the posts made, failed and the spans dropped so far."""
        return {
            "collector": self.base,
            "posted": self.posted,
            "failed": self.failed,
            "dropped": self.export.dropped,
            "pending": self.export.pending(),
            "last_error": self.last_error,
        }


_exporter: TabExporter | None = None


def enable(
    collector_url: str,
    service_name: str = DEFAULT_SERVICE,
    headers: Mapping[str, str] | None = None,
    post: Post = fetch_post,
) -> TabExporter:
    """Turns the tab's telemetry on, exporting to ``collector_url`` (replacing any before).

    Raises:
        ConfigError: A malformed collector URL (telemetry stays as it was).
    """
    global _exporter
    exporter = TabExporter(collector_url, service_name, headers, post)
    disable()
    _exporter = exporter
    activate(exporter.telemetry)
    return exporter


def disable() -> None:
    """Turns the tab's telemetry off (what waits is not sent)."""
    global _exporter
    if _exporter is not None:
        uninstall(_exporter.telemetry)
        _exporter = None


def exporter() -> TabExporter | None:
    """The enabled exporter, or None while off."""
    return _exporter
