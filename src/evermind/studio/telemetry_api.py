"""The Studio's telemetry handlers: OTLP/HTTP JSON to a collector the user names (browser-safe).

Off by default (the tab is offline by design): ``telemetry_configure`` with a collector URL
turns it on (:mod:`evermind.telemetry.tab`), an empty one off. While on, every Studio call is
an INTERNAL span ``studio <call>`` (:func:`call_span`) and the GenAI operations inside it
(a model called through the fetch bridge) are its children; spans are posted after each call
without the call waiting, and on ``telemetry_flush``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from evermind import telemetry
from evermind.errors import ConfigError
from evermind.studio.rpc import Router
from evermind.telemetry import tab

router = Router()
handler = router.handler

#: The attribute naming the Studio call of a ``studio <call>`` span.
CALL_ATTRIBUTE = "evermind.studio.call"


def call_span(name: str) -> AbstractContextManager[Any]:
    """The span of Studio call ``name`` while telemetry is on (the telemetry calls are not
    traced: they are the export itself); a no-op otherwise."""
    active = telemetry.active()
    if active is None or name.startswith("telemetry_"):
        return nullcontext()
    return active.span(f"studio {name}", {CALL_ATTRIBUTE: name})


def after_call() -> None:
    """Starts posting what the call recorded, without waiting for it (no-op while off)."""
    exporter = tab.exporter()
    if exporter is not None:
        exporter.schedule_flush()


@handler
async def telemetry_configure(
    collector_url: str = "", service_name: str = tab.DEFAULT_SERVICE, headers: Any = None
) -> dict[str, Any]:
    """Turns OTLP export on to ``collector_url`` (its OTLP/HTTP base, ``http://host:4318``),
    or off when it is empty; returns the status."""
    if not isinstance(collector_url, str) or not isinstance(service_name, str):
        raise ConfigError("telemetry_configure: collector_url and service_name must be strings")
    if headers is not None and not (
        isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())
    ):
        raise ConfigError("telemetry_configure: headers must be an object of strings")
    if collector_url.strip():
        tab.enable(collector_url, service_name or tab.DEFAULT_SERVICE, headers)
    else:
        tab.disable()
    return _status()


@handler
async def telemetry_flush() -> dict[str, Any]:
    """Posts every waiting span and the metrics now; returns the status."""
    exporter = tab.exporter()
    if exporter is None:
        return _status()
    return await exporter.flush()


@handler
async def telemetry_status() -> dict[str, Any]:
    """``{"enabled": false}``, or the collector and the posts made, failed and dropped."""
    return _status()


def _status() -> dict[str, Any]:
    exporter = tab.exporter()
    if exporter is None:
        return {"enabled": False}
    return {"enabled": True, **exporter.status()}
