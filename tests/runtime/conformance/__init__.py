"""The gateway's conformance suite: provider transcripts replayed through it, diffed field by field.

Each ``*.json`` here is one exchange written from the providers' documented wire formats
(Anthropic Messages, OpenAI Chat Completions, OpenAI Responses as ``responses_*``; streams
event by event): the client's ``request``, the ``path`` it is sent to, and the upstream's
``response`` (``status`` with ``json`` and any ``headers``, or ``events``: server-sent
events). :class:`TranscriptUpstream` is a loopback upstream that records what it receives
and answers with the transcript; the tests (``tests/runtime/test_conformance_*.py``) send
the request with the official SDK through the gateway and diff what the upstream received
against what the client sent, and what the client received against what the upstream sent,
apart from what the gateway documents it changes (docs/gateway.md, "Pass-through"):
``model`` (the client's id back, the upstream's name up), the ``evermind`` field it adds,
and on a stream the SDK's own ``stream_options.include_usage`` upstream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import gateway_config
from tests.upstreams import Upstream

HERE = Path(__file__).parent


def transcripts(prefix: str) -> dict[str, dict[str, Any]]:
    """The transcripts whose file name starts with ``prefix``, by name."""
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(HERE.glob(f"{prefix}*.json"))
    }


class TranscriptUpstream(Upstream):
    """A loopback upstream on every path: records each request and answers the next queued
    transcript response (:meth:`answer`); 500 when none is queued."""

    provider = "transcript"

    def _routes(self) -> list[Route]:
        return [Route("/{path:path}", self._any, methods=["GET", "POST"])]

    def _authorised(self, request: Request) -> bool:
        return True

    async def _any(self, request: Request) -> Response:
        _, _, scripted = await self._admit(request)
        if scripted is None:
            return JSONResponse({"error": {"message": "no transcript queued"}}, 500)
        return scripted

    def answer(self, response: dict[str, Any], protocol: str) -> None:
        """Queues a transcript's ``response`` for the next request."""
        events = response.get("events")
        if events is None:
            self.script(response["status"], response["json"], headers=response.get("headers"))
            return
        sse = []
        for event in events:
            data = event["data"]
            text = data if isinstance(data, str) else json.dumps(data)
            # Anthropic's events are named, and the Responses API's; Chat Completions' not.
            named = f"event: {event['event']}\n" if "event" in event else ""
            sse.append(f"{named}data: {text}\n\n")
        self.script(response["status"], events=sse)


def diff(expected: Any, got: Any, where: str = "") -> list[str]:
    """Every difference between two JSON values, one line each (``path: expected != got``)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        lines = []
        for key in sorted(set(expected) | set(got)):
            at = f"{where}.{key}" if where else key
            if key not in got:
                lines.append(f"{at}: missing (expected {expected[key]!r})")
            elif key not in expected:
                lines.append(f"{at}: unexpected {got[key]!r}")
            else:
                lines += diff(expected[key], got[key], at)
        return lines
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{where}: {len(expected)} items != {len(got)}"]
        return [
            line
            for i, (e, g) in enumerate(zip(expected, got, strict=True))
            for line in diff(e, g, f"{where}[{i}]")
        ]
    if expected != got or type(expected) is not type(got):
        return [f"{where}: {expected!r} != {got!r}"]
    return []


def upstream_name(model: str, upstreams: set[str]) -> str:
    """The model name the upstream is asked for: ``<upstream>/<name>`` loses its prefix, a
    bare id goes as it is."""
    prefix, slash, name = model.partition("/")
    return name if slash and prefix in upstreams else model


def received_one(
    upstream: TranscriptUpstream, before: int, path: str, headers: dict[str, str] | None = None
) -> Any:
    """The body of the one request the upstream received since ``before`` requests, after
    checking its path (and that ``headers`` came with it)."""
    received = upstream.requests[before:]
    assert len(received) == 1, [r.path for r in received]
    assert received[0].path == path
    if headers:
        assert {k: received[0].headers.get(k) for k in headers} == headers
    return received[0].body


KEY = "sk-conformance-upstream-7d41c2"


@contextmanager
def gateway_over(upstream: TranscriptUpstream, root: Path) -> Iterator[ServerThread]:
    """A gateway whose ``anthropic`` and ``openai`` upstreams are both ``upstream`` (each the
    default for bare ids on its route), with the default cache (``terms``, verified)."""
    config = gateway_config(
        root,
        {
            "cache": {"embedder": "terms"},
            "upstreams": {
                "anthropic": {"base_url": upstream.url, "api_key": KEY, "max_retries": 0},
                "openai": {"base_url": upstream.url + "/v1", "api_key": KEY, "max_retries": 0},
            },
        },
    )
    with ServerThread(config) as running:
        yield running


class Sent:
    """The JSON bodies an SDK client sends (an ``httpx2`` request hook records them)."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    def __call__(self, request: httpx2.Request) -> None:
        self.bodies.append(json.loads(request.content) if request.content else None)

    def client(self) -> httpx2.Client:
        """An ``httpx2`` client for an SDK's ``http_client`` that records into this."""
        return httpx2.Client(event_hooks={"request": [self]}, timeout=30)
