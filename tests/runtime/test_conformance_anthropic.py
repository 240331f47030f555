"""Anthropic Messages conformance: the ``anthropic`` SDK through the gateway to a transcript
upstream (tests/runtime/conformance/anthropic_*.json), diffed field by field.

Up: the upstream receives exactly the SDK's body, ``model`` aside (the upstream's own name).
Down: a JSON answer is the upstream's, ``model`` (the client's id) and ``evermind`` aside; a
stream carries the same events (consecutive deltas of one block folded), the same blocks, the
upstream's usage in ``message_start`` and ``message_delta`` and its ``stop_reason``; an error
keeps the upstream's status, its Anthropic error ``type`` and its message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
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
from tests.runtime.helpers import TOKEN_A, bearer

TRANSCRIPTS = transcripts("anthropic_")
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
    with gateway_over(upstream, tmp_path_factory.mktemp("conformance-anthropic")) as running:
        yield running


def _client(gateway: ServerThread, sent: Sent) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gateway.url, api_key=TOKEN_A, max_retries=0, http_client=sent.client()
    )


def _call(
    client: anthropic.Anthropic, path: str, request: dict[str, Any], headers: dict[str, str]
) -> Any:
    """The SDK call of ``request`` (fields its method does not name go in ``extra_body``)."""
    create = (
        client.messages.count_tokens if path.endswith("count_tokens") else client.messages.create
    )
    accepted = sdk_arguments(create)
    named = {k: v for k, v in request.items() if k in accepted}
    extra = {k: v for k, v in request.items() if k not in accepted}
    raw = (
        client.messages.with_raw_response.count_tokens
        if path.endswith("count_tokens")
        else client.messages.with_raw_response.create
    )
    return raw(**named, extra_body=extra or None, extra_headers=headers or None)


@pytest.mark.parametrize(
    "name", sorted(n for n, t in TRANSCRIPTS.items() if "events" not in t["response"])
)
def test_a_json_exchange_passes_through_field_by_field(
    gateway: ServerThread, upstream: TranscriptUpstream, name: str
) -> None:
    transcript = TRANSCRIPTS[name]
    request, response = transcript["request"], transcript["response"]
    headers = transcript.get("headers", {})
    upstream.reset()
    upstream.answer(response, "anthropic")
    sent, before = Sent(), len(upstream.requests)
    if response["status"] >= 400:
        with pytest.raises(anthropic.APIStatusError) as raised:
            _call(_client(gateway, sent), transcript["path"], request, headers)
        got = raised.value.response
    else:
        got = _call(_client(gateway, sent), transcript["path"], request, headers).http_response
    received = received_one(upstream, before, transcript["path"], headers)
    expected_up = {**sent.bodies[0], "model": upstream_name(request["model"], UPSTREAMS)}
    assert diff(expected_up, received) == [], "the upstream did not receive the client's body"
    assert got.status_code == response["status"], got.text
    body = got.json()
    if response["status"] >= 400:
        # The upstream's error object, word for word (its request_id is its own).
        assert body["type"] == "error"
        assert diff(response["json"]["error"], body["error"]) == []
        # Its Retry-After too (a 503/529 saying when to come back), and none invented.
        assert got.headers.get("retry-after") == response.get("headers", {}).get("retry-after")
        return
    expected_down = dict(response["json"])
    if "model" in expected_down:
        expected_down["model"] = request["model"]
    assert diff(expected_down, {k: v for k, v in body.items() if k not in ADDED}) == []


def _fold(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A stream as what it says: event types (pings left out, consecutive deltas of a block
    as one), each block's whole content, the start and end usage, the stop reason."""
    kinds: list[str] = []
    blocks: dict[int, dict[str, Any]] = {}
    folded: dict[str, Any] = {}
    for event in events:
        kind = event["type"]
        if kind == "ping" or (kinds and kind == "content_block_delta" == kinds[-1]):
            pass
        else:
            kinds.append(kind)
        if kind == "message_start":
            usage = event["message"]["usage"]
            folded["start_usage"] = {
                k: usage.get(k)
                for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            }
        elif kind == "content_block_start":
            blocks[event["index"]] = {**event["content_block"], "partial_json": ""}
        elif kind == "content_block_delta":
            delta, block = event["delta"], blocks[event["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "citations_delta":
                block.setdefault("citations", []).append(delta["citation"])
            else:
                block["partial_json"] += delta["partial_json"]
        elif kind == "message_delta":
            folded["stop_reason"] = event["delta"]["stop_reason"]
            folded["output_tokens"] = event["usage"]["output_tokens"]
    for block in blocks.values():
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("partial_json") or "{}")
        else:
            block.pop("partial_json")
    return {**folded, "events": kinds, "blocks": [blocks[i] for i in sorted(blocks)]}


@pytest.mark.parametrize(
    "name", sorted(n for n, t in TRANSCRIPTS.items() if "events" in t["response"])
)
def test_a_stream_passes_through_event_by_event(
    gateway: ServerThread, upstream: TranscriptUpstream, name: str
) -> None:
    transcript = TRANSCRIPTS[name]
    request, response = transcript["request"], transcript["response"]
    headers = transcript.get("headers", {})
    upstream.reset()
    upstream.answer(response, "anthropic")
    sent, before = Sent(), len(upstream.requests)
    client = _client(gateway, sent)
    accepted = sdk_arguments(client.messages.create)
    named = {k: v for k, v in request.items() if k in accepted and k != "stream"}
    extra = {k: v for k, v in request.items() if k not in accepted}
    with client.messages.create(
        **named, stream=True, extra_body=extra or None, extra_headers=headers or None
    ) as stream:
        got = [event.to_dict() for event in stream]
    received = received_one(upstream, before, transcript["path"], headers)
    expected_up = {**sent.bodies[0], "model": upstream_name(request["model"], UPSTREAMS)}
    assert diff(expected_up, received) == []
    upstream_events = [e["data"] for e in response["events"]]
    assert diff(_fold(upstream_events), _fold(got)) == []
    # Event for event: the upstream's own events (its message id, pings, every delta as it
    # came), ``message_start``'s model the client's id, ``evermind`` on ``message_delta``.
    relayed = [e for e in upstream_events if e["type"] != "ping"]  # the SDK skips pings
    assert len(got) == len(relayed), [e["type"] for e in got]
    for want, have in zip(relayed, got, strict=True):
        if want["type"] == "message_start":
            want = {**want, "message": {**want["message"], "model": request["model"]}}
        if want["type"] == "message_delta":
            assert "evermind" in have
            have = {k: v for k, v in have.items() if k != "evermind"}
        assert diff(want, have) == [], (want, have)
    assert (
        got[0]["message"]["usage"]["input_tokens"]
        == upstream_events[0]["message"]["usage"]["input_tokens"]
        > 0
    )


def test_a_request_without_max_tokens_is_refused_as_anthropic_does(
    gateway: ServerThread, upstream: TranscriptUpstream
) -> None:
    """Anthropic requires max_tokens: the gateway answers its 400 shape and calls no one."""
    before = len(upstream.requests)
    body = {"model": "claude-sonnet-4-5-20250929", "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        answer = http.post("/v1/messages", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in error["error"]["message"]
    assert len(upstream.requests) == before


def test_the_model_list_is_the_upstreams_own(
    gateway: ServerThread, upstream: TranscriptUpstream
) -> None:
    listed = {
        "data": [
            {
                "type": "model",
                "id": "claude-sonnet-4-5-20250929",
                "display_name": "Claude Sonnet 4.5",
                "created_at": "2025-09-29T00:00:00Z",
            }
        ],
        "has_more": False,
        "first_id": "claude-sonnet-4-5-20250929",
        "last_id": "claude-sonnet-4-5-20250929",
    }
    upstream.reset()
    upstream.answer({"status": 200, "json": listed}, "anthropic")
    before = len(upstream.requests)
    raw = _client(gateway, Sent()).models.with_raw_response.list()
    assert upstream.requests[before].path == "/v1/models"
    assert [m.id for m in raw.parse().data] == ["claude-sonnet-4-5-20250929"]
    assert diff(listed, raw.http_response.json()) == []


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/v1/messages/count_tokens"), ("GET", "/v1/models")]
)
def test_x_api_key_is_the_runtime_token_on_every_anthropic_route(
    gateway: ServerThread, upstream: TranscriptUpstream, method: str, path: str
) -> None:
    """Claude Code with ANTHROPIC_API_KEY sends x-api-key, not a bearer token."""
    upstream.reset()
    upstream.answer({"status": 200, "json": {"input_tokens": 3, "data": []}}, "anthropic")
    body = {"model": "claude-sonnet-4-5-20250929", "messages": [{"role": "user", "content": "a"}]}
    headers = {"x-api-key": TOKEN_A, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as http:
        answer = http.request(method, path, json=body if method == "POST" else None)
    assert answer.status_code == 200, answer.text
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        refused = http.request(method, path, headers={"x-api-key": "not-a-token"})
    assert refused.status_code == 401
    if path.startswith("/v1/messages"):  # the model list is shared: its errors are OpenAI's
        assert refused.json()["type"] == "error"


def test_a_long_conversation_is_the_providers_to_refuse(
    gateway: ServerThread, upstream: TranscriptUpstream
) -> None:
    """300,000 characters (past the local models' max_input_chars) reach the upstream: its
    context window is the limit, not one of ours."""
    upstream.reset()
    upstream.answer(TRANSCRIPTS["anthropic_text"]["response"], "anthropic")
    long_turn = "Here is the file I read:\n" + "x = 1\n" * 50_000
    sent = Sent()
    _client(gateway, sent).messages.create(
        model="claude-sonnet-4-5-20250929",
        max_tokens=1024,
        messages=[{"role": "user", "content": long_turn}],
    )
    assert upstream.requests[-1].body["messages"][0]["content"] == long_turn


def test_a_stream_s_raw_events_are_the_upstream_s_pings_and_all(
    gateway: ServerThread, upstream: TranscriptUpstream
) -> None:
    """Below the SDK (which skips pings): the SSE event names and data lines on the wire are
    the upstream's, one for one, ``model`` and ``evermind`` aside."""
    transcript = TRANSCRIPTS["anthropic_stream_citations"]
    upstream.reset()
    upstream.answer(transcript["response"], "anthropic")
    with httpx.Client(timeout=30) as client:
        answer = client.post(
            gateway.url + "/v1/messages",
            json=transcript["request"],
            headers={"x-api-key": TOKEN_A, "anthropic-version": "2023-06-01"},
        )
    assert answer.status_code == 200
    names = [line[7:] for line in answer.text.splitlines() if line.startswith("event: ")]
    datas = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]
    upstream_events = transcript["response"]["events"]
    assert names == [e["event"] for e in upstream_events]
    for want, have in zip(upstream_events, datas, strict=True):
        have = {k: v for k, v in have.items() if k != "evermind"}
        if want["event"] == "message_start":
            assert have["message"].pop("model") == transcript["request"]["model"]
            want = {"data": {**want["data"], "message": dict(want["data"]["message"])}}
            want["data"]["message"].pop("model")
        assert have == want["data"]
