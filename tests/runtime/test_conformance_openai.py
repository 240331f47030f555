"""OpenAI Chat Completions conformance: the ``openai`` SDK through the gateway to a transcript
upstream (tests/runtime/conformance/openai_*.json), diffed field by field.

Up: the upstream receives exactly the SDK's body, ``model`` aside (the upstream's own name)
and, on a stream, ``stream_options.include_usage`` (the gateway always asks for the usage it
counts). Down: a JSON answer is the upstream's, ``model`` (the client's id) and ``evermind``
aside; a stream says the same text, tool calls, ``finish_reason`` and usage, and carries the
usage chunk exactly when the client asked for it; an error keeps the upstream's status, its
error ``type`` and its message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from evermind.bridges.wire import sdk_arguments
from evermind.runtime.server import ServerThread
from tests.runtime.conformance import (
    Sent,
    TranscriptUpstream,
    diff,
    gateway_over,
    received_one,
    transcripts,
    upstream_name,
)
from tests.runtime.helpers import TOKEN_A

TRANSCRIPTS = transcripts("openai_")
#: A Messages API answer, for the request an OpenAI client sends to an Anthropic upstream.
ANTHROPIC_ANSWER = transcripts("anthropic_text")["anthropic_text"]["response"]["json"]
UPSTREAMS = {"anthropic", "openai"}
#: What the gateway adds to an answer (docs/gateway.md): never in the upstream's.
ADDED = ("evermind",)


@pytest.fixture(scope="module")
def upstream() -> Iterator[TranscriptUpstream]:
    with TranscriptUpstream() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, upstream: TranscriptUpstream
) -> Iterator[ServerThread]:
    with gateway_over(upstream, tmp_path_factory.mktemp("conformance-openai")) as running:
        yield running


def _client(gateway: ServerThread, sent: Sent) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=TOKEN_A, max_retries=0, http_client=sent.client()
    )


def _split(request: dict[str, Any], create: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fields the SDK's method names, the rest for ``extra_body``)."""
    accepted = sdk_arguments(create)
    return (
        {k: v for k, v in request.items() if k in accepted},
        {k: v for k, v in request.items() if k not in accepted},
    )


@pytest.mark.parametrize(
    "name", sorted(n for n, t in TRANSCRIPTS.items() if "events" not in t["response"])
)
def test_a_json_exchange_passes_through_field_by_field(
    gateway: ServerThread, upstream: TranscriptUpstream, name: str
) -> None:
    transcript = TRANSCRIPTS[name]
    request, response = transcript["request"], transcript["response"]
    upstream.reset()
    upstream.answer(response, "openai")
    sent, before = Sent(), len(upstream.requests)
    chat = _client(gateway, sent).chat.completions
    named, extra = _split(request, chat.create)
    if response["status"] >= 400:
        with pytest.raises(openai.APIStatusError) as raised:
            chat.with_raw_response.create(**named, extra_body=extra or None)
        got = raised.value.response
    else:
        got = chat.with_raw_response.create(**named, extra_body=extra or None).http_response
    received = received_one(upstream, before, transcript["path"])
    expected_up = {**sent.bodies[0], "model": upstream_name(request["model"], UPSTREAMS)}
    assert diff(expected_up, received) == [], "the upstream did not receive the client's body"
    assert "max_tokens" not in received or "max_tokens" in request  # none is invented
    assert got.status_code == response["status"], got.text
    body = got.json()
    if response["status"] >= 400:
        # The upstream's error object, word for word: type, message, param and code.
        assert diff(response["json"], body) == []
        # Its Retry-After too (a 503/529 saying when to come back), and none invented.
        assert got.headers.get("retry-after") == response.get("headers", {}).get("retry-after")
        return
    expected_down = {**response["json"], "model": request["model"]}
    assert diff(expected_down, {k: v for k, v in body.items() if k not in ADDED}) == []


def _fold(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A stream as what it says: the text, each tool call whole, the finish reason, and the
    usage chunk (None when there is none)."""
    text, calls, finish, usage = "", {}, None, None
    for chunk in chunks:
        if chunk.get("usage") and not chunk["choices"]:
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                whole = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                whole["id"] = call.get("id") or whole["id"]
                function = call.get("function") or {}
                whole["name"] = function.get("name") or whole["name"]
                whole["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    for call in calls.values():
        call["arguments"] = json.loads(call["arguments"] or "{}")
    return {
        "text": text,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
        "usage": usage,
    }


def _usage_numbers(usage: dict[str, Any] | None) -> Any:
    if usage is None:
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return [usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"], cached]


@pytest.mark.parametrize(
    "name", sorted(n for n, t in TRANSCRIPTS.items() if "events" in t["response"])
)
def test_a_stream_passes_through_chunk_by_chunk(
    gateway: ServerThread, upstream: TranscriptUpstream, name: str
) -> None:
    transcript = TRANSCRIPTS[name]
    request, response = transcript["request"], transcript["response"]
    upstream.reset()
    upstream.answer(response, "openai")
    sent, before = Sent(), len(upstream.requests)
    chat = _client(gateway, sent).chat.completions
    named, extra = _split(request, chat.create)
    got = [chunk.to_dict() for chunk in chat.create(**named, extra_body=extra or None)]
    received = received_one(upstream, before, transcript["path"])
    options = {**(sent.bodies[0].get("stream_options") or {}), "include_usage": True}
    expected_up = {
        **sent.bodies[0],
        "model": upstream_name(request["model"], UPSTREAMS),
        "stream_options": options,  # documented: the gateway counts every stream's usage
    }
    assert diff(expected_up, received) == []
    upstream_chunks = [e["data"] for e in response["events"] if isinstance(e["data"], dict)]
    want, have = _fold(upstream_chunks), _fold(got)
    asked = bool((request.get("stream_options") or {}).get("include_usage"))
    want_usage, have_usage = want.pop("usage"), have.pop("usage")
    assert _usage_numbers(have_usage) == (_usage_numbers(want_usage) if asked else None)
    assert diff(want, have) == []
    assert all(c["model"] == request["model"] for c in got)
    if asked:  # every chunk before the usage chunk says usage: null, as the upstream's do
        assert all("usage" in c and c["usage"] is None for c in got[:-1]), got
    # Event for event: the upstream's own chunks (ids, system_fingerprint, logprobs, every
    # tool-call piece), ``model`` the client's id; without the client's include_usage (the
    # gateway asked for it upstream) no usage key and no usage chunk; ``evermind`` on the last.
    expected_chunks = []
    for chunk in upstream_chunks:
        relayed = {**chunk, "model": request["model"]}
        if not asked and "usage" in relayed:
            if not relayed["choices"]:
                continue
            del relayed["usage"]
        expected_chunks.append(relayed)
    assert "evermind" in got[-1] and not any("evermind" in c for c in got[:-1])
    have_chunks = [{k: v for k, v in c.items() if k != "evermind"} for c in got]
    assert len(have_chunks) == len(expected_chunks)
    for want_chunk, have_chunk in zip(expected_chunks, have_chunks, strict=True):
        assert diff(want_chunk, have_chunk) == [], (want_chunk, have_chunk)


def test_the_model_list_carries_the_upstreams_own(
    gateway: ServerThread, upstream: TranscriptUpstream
) -> None:
    """GET /v1/models: the local models (none here), then the ``openai`` default upstream's
    entries as it lists them."""
    entry = {"id": "gpt-4o-mini", "object": "model", "created": 1721172741, "owned_by": "system"}
    upstream.reset()
    upstream.answer({"status": 200, "json": {"object": "list", "data": [entry]}}, "openai")
    raw = _client(gateway, Sent()).models.with_raw_response.list()
    assert upstream.requests[-1].path == "/v1/models"
    assert raw.http_response.json() == {"object": "list", "data": [entry]}
    assert [m.id for m in raw.parse().data] == ["gpt-4o-mini"]


def test_across_protocols_the_request_is_translated_and_what_is_dropped_is_named(
    gateway: ServerThread, upstream: TranscriptUpstream
) -> None:
    """An OpenAI client of a Messages API upstream: the upstream's required max_tokens is the
    configured default (none was sent), and the fields Messages cannot carry are named."""
    answer = ANTHROPIC_ANSWER
    upstream.reset()
    upstream.answer({"status": 200, "json": answer}, "anthropic")
    chat = _client(gateway, Sent()).chat.completions
    raw = chat.with_raw_response.create(
        model="anthropic/claude-sonnet-4-5-20250929",
        messages=[{"role": "user", "content": "Hello across protocols"}],
        logit_bias={"50256": -100},
        user="user-1234",
    )
    received = upstream.requests[-1]
    assert received.path == "/v1/messages"
    assert (
        received.body["max_tokens"] == 8192
        and received.body["model"] == "claude-sonnet-4-5-20250929"
    )
    assert "logit_bias" not in received.body and "user" not in received.body
    assert raw.headers["x-evermind-dropped"] == "logit_bias,user"
    assert raw.parse().choices[0].message.content == answer["content"][0]["text"]
