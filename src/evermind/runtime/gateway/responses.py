"""``POST /v1/responses``: OpenAI's Responses API passed through the gateway (native-only).

The ``openai`` SDK's ``client.responses.create(...)``, pointed at the gateway, works as
against OpenAI, for models of an upstream of the ``openai`` protocol: the body goes upstream
as the client sent it, ``model`` aside (the upstream's own name: ``openai/gpt-4o-mini`` →
``gpt-4o-mini``; a bare id through ``[default_upstreams] openai``), and the upstream's answer
comes back as it is (keys scrubbed): its JSON, or its server-sent events one for one
(``response.created``, ``response.output_text.delta``, ..., ``response.completed``). An
upstream's error keeps its status and its error object (``runtime/app.py``). Nothing is
translated: a model of another protocol is refused (400, ``unsupported_protocol``).

Not cached: every answer says ``x-evermind-cache: bypass`` with
``x-evermind-cache-reason: responses_api``. Counted like chat completions: the ``usage`` of
the response (``input_tokens`` with ``input_tokens_details.cached_tokens``,
``output_tokens``) is priced and goes to ``/metrics`` and the tenant's spend; a usage that is
not whole numbers in range makes the answer malformed (502, or the stream's ``error`` event),
as on the other routes. A stream must end with ``response.completed``,
``response.incomplete``, ``response.failed`` or an ``error`` event; one that stops before is
cut, and the client gets an ``error`` event (the Responses API's own shape) in its place.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from evermind.bridges import answers
from evermind.bridges.base import Completion, Usage
from evermind.bridges.redacting import StreamScrubber
from evermind.bridges.streams import SSEEvent
from evermind.errors import EvermindError, InputError, NotFound, UpstreamError
from evermind.runtime.gateway.config import AUTO_MODEL
from evermind.runtime.gateway.core import Gateway, Resolved
from evermind.runtime.gateway.openai import SSE_HEADERS
from evermind.runtime.state import Reader, RuntimeDep
from evermind.tokens import Principal

router = APIRouter(tags=["gateway"])

#: The cache headers of every answer on this route: it is passed through, never cached.
NOT_CACHED = {"x-evermind-cache": "bypass", "x-evermind-cache-reason": "responses_api"}
#: The upstream's path, relative to the OpenAI SDK's base URL (``.../v1``).
UPSTREAM_PATH = "/responses"
#: The events that end a Responses stream; the first three carry the whole response.
FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


@router.post("/v1/responses", summary="Responses (OpenAI shape), passed through the gateway")
async def responses(runtime: RuntimeDep, who: Reader, http_request: Request) -> Any:
    """The upstream's answer to the client's Responses API request, as it is."""
    raw = await _body(http_request)
    gateway, resolved = _resolved(runtime.gateway, raw["model"], who)
    body = {**raw, "model": resolved.model}
    if raw.get("stream") is True:
        first, events = await gateway.open_events(resolved, UPSTREAM_PATH, body)
        relayed = _relay(gateway, resolved, first, events)
        return StreamingResponse(
            relayed, media_type="text/event-stream", headers={**SSE_HEADERS, **NOT_CACHED}
        )
    answer = await gateway.forward(resolved, "POST", UPSTREAM_PATH, body)
    try:
        completion = _completion(gateway, resolved, answer)
    except UpstreamError as err:
        gateway.failed(resolved.tenant, resolved.upstream.name, err)
        raise
    gateway.account(resolved.tenant, resolved.upstream.name, "bypass", completion)
    return JSONResponse(answer, headers=NOT_CACHED)


async def _body(http_request: Request) -> dict[str, Any]:
    """The client's JSON object, with a string ``model``.

    Raises:
        InputError: Not JSON, not an object, or no model (400, as OpenAI refuses it).
    """
    try:
        raw = json.loads(await http_request.body())
    except ValueError as err:
        raise InputError(
            f"the body is not JSON ({err}); expected a Responses API request object",
            code="invalid_json",
        ) from err
    if not isinstance(raw, dict) or not isinstance(raw.get("model"), str) or not raw["model"]:
        raise InputError(
            "expected a JSON object with a string 'model' (a Responses API request)",
            code="invalid_request",
        )
    return raw


def _resolved(gateway: Gateway | None, model: str, who: Principal) -> tuple[Gateway, Resolved]:
    """The gateway and the ``openai``-protocol upstream serving ``model``.

    Raises:
        NotFound: No gateway, or no upstream serves the model.
        InputError: The upstream speaks another protocol, or the model is the router.
    """
    if model == AUTO_MODEL:
        raise InputError(
            f"model {model!r} routes chat completions; /v1/responses is passed through to an "
            "upstream as it is; hint: name an upstream model, such as openai/gpt-4o-mini",
            code="unsupported_model",
        )
    resolved = None
    if gateway is not None:
        resolved = gateway.resolve(model, who) or gateway.resolve(model, who, "openai")
    if gateway is None or resolved is None:
        raise NotFound(
            f"model {model!r} is not a gateway model; /v1/responses serves <upstream>/<name> "
            "models of the server's --upstreams file (and bare ids with an "
            "[default_upstreams] openai upstream); local evermind/ models answer on "
            "/v1/chat/completions",
            code="model_not_found",
        )
    upstream = resolved.upstream
    if upstream.protocol != "openai":
        raise InputError(
            f"model {model!r} is served by upstream {upstream.name!r}, which speaks the "
            f"{upstream.protocol!r} protocol; /v1/responses is passed through, never "
            "translated, so it needs an upstream of the 'openai' protocol; hint: use "
            "/v1/chat/completions or /v1/messages for this model",
            code="unsupported_protocol",
        )
    return gateway, resolved


def _usage(response: Mapping[str, Any], provider: str) -> Usage:
    """The :class:`Usage` of a Responses API ``response`` object (none reported: zero).

    Raises:
        UpstreamError: A count that is not a whole number in range (``upstream_malformed``).
    """
    usage = answers.mapping(response.get("usage"), provider, "usage")
    where = "usage.input_tokens_details"
    details = answers.mapping(usage.get("input_tokens_details"), provider, where)
    cached = answers.count(details.get("cached_tokens"), provider, f"{where}.cached_tokens")
    total = answers.count(usage.get("input_tokens"), provider, "usage.input_tokens")
    return Usage(
        input_tokens=max(total - cached, 0),
        output_tokens=answers.count(usage.get("output_tokens"), provider, "usage.output_tokens"),
        cache_read_tokens=cached,
    )


def _completion(gateway: Gateway, resolved: Resolved, response: object) -> Completion:
    """What the gateway counts of a response object: its usage, priced.

    Raises:
        UpstreamError: Not an object, or a malformed usage (``upstream_malformed``).
    """
    provider = resolved.upstream.protocol
    fields = answers.mapping(response, provider, "the response", required=True)
    usage = _usage(fields, provider)
    model = fields.get("model")
    named = model if isinstance(model, str) and model else resolved.model
    cost = gateway.prices.price(named, usage)
    if cost is None and named != resolved.model:
        cost = gateway.prices.price(resolved.model, usage)
    return Completion(text="", model=named, provider=provider, usage=usage, cost_usd=cost)


def _sse(name: str, data: dict[str, Any]) -> bytes:
    """One event as the Responses API sends it (``event:`` line, then ``data:``)."""
    named = f"event: {name}\n" if name else ""
    return f"{named}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


#: The delta events whose text may hold a key split across two of them, and the event that
#: closes each part.
DELTAS = {
    "response.output_text.delta": "response.output_text.done",
    "response.function_call_arguments.delta": "response.function_call_arguments.done",
}
CLOSING = {done: delta for delta, done in DELTAS.items()}


class _Scrubbed:
    """A stream's events with every key scrubbed, one for one: whole strings in every event,
    and the text of delta events through one
    :class:`~evermind.bridges.redacting.StreamScrubber` per output part. A key may arrive
    split across two deltas: a delta whose tail could begin one is sent without that tail,
    and held until the next event of its part (the next delta then carries the tail; the
    event closing the part, it goes back into the held delta), so the events stay the
    upstream's, in number and order."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.parts: dict[tuple[object, object], StreamScrubber] = {}
        self.held: dict[tuple[object, object], tuple[str, dict[str, Any]]] = {}

    def events(self, name: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        data = self.gateway.scrub_value(data)
        kind = data.get("type")
        part = (data.get("output_index"), data.get("content_index"))
        out = [self.held.pop(p) for p in list(self.held) if p != part]  # order kept
        if kind in DELTAS and isinstance(data.get("delta"), str):
            scrubber = self.parts.setdefault(part, self.gateway.stream_scrubber())
            if part in self.held:
                out.append(self.held.pop(part))
            event = (name, {**data, "delta": scrubber.feed(data["delta"])})
            if scrubber.holding:
                self.held[part] = event
            else:
                out.append(event)
            return out
        closing = self.parts.pop(part, None) if kind in CLOSING else None
        rest = "" if closing is None else closing.flush()
        held = self.held.pop(part, None)
        if held is not None:
            out.append((held[0], {**held[1], "delta": held[1]["delta"] + rest}))
        elif rest:  # no delta of this part to carry it (an upstream out of order): one more
            delta_kind = CLOSING[str(kind)]
            keep = {k: v for k, v in data.items() if k not in ("text", "arguments", "name")}
            out.append((delta_kind, {**keep, "type": delta_kind, "delta": rest}))
        return [*out, (name, data)]


async def _relay(
    gateway: Gateway,
    resolved: Resolved,
    first: SSEEvent | None,
    events: AsyncIterator[SSEEvent],
) -> AsyncIterator[bytes]:
    """The upstream's events, one for one (keys scrubbed), until the one that ends the
    stream; the usage of its response counted. A failure after the first byte is an ``error``
    event (``code``: the gateway's error code) and ends the stream."""
    provider, tenant, name = resolved.upstream.protocol, resolved.tenant, resolved.upstream.name
    scrubbed, sequence = _Scrubbed(gateway), -1
    try:
        async with aclosing(gateway.events(resolved, first, events)) as relayed:
            async for event in relayed:
                parsed = answers.parse_json(event.data, provider, "an event")
                data = dict(answers.mapping(parsed, provider, "an event"))
                number = data.get("sequence_number")
                if isinstance(number, int) and not isinstance(number, bool):
                    sequence = number
                kind = data.get("type")
                completion = None
                if kind in FINAL_EVENTS:  # judged before it is sent: a bad usage is an error
                    completion = _completion(gateway, resolved, data.get("response"))
                for out_name, out in scrubbed.events(event.event, data):
                    yield _sse(out_name, out)
                if completion is not None:
                    gateway.account(tenant, name, "bypass", completion)
                    return
                if kind == "error":  # the upstream's own: relayed, and counted as a failure
                    gateway.failed(tenant, name, answers.stream_error(provider, data))
                    return
        raise answers.stream_cut(provider, "no response.completed event")
    except EvermindError as err:  # the headers are gone: report in the stream, as OpenAI does
        gateway.failed(tenant, name, err)
        error = {
            "type": "error",
            "code": err.code,
            "message": gateway.scrub(str(err)),
            "param": None,
            "sequence_number": sequence + 1,
        }
        yield _sse("error", error)
