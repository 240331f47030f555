"""OpenAI Responses API conformance: the ``openai`` SDK's ``client.responses.create`` through
the gateway to a transcript upstream (tests/runtime/conformance/responses_*.json), diffed
field by field.

Up: the upstream receives exactly the SDK's body, ``model`` aside (the upstream's own name).
Down: the JSON answer is the upstream's, every field as it sent it (``model`` too: nothing is
added); a stream is the upstream's events one for one, same names, same data; an error keeps
the upstream's status and its error object word for word. Every answer says it was not
cached.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

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

TRANSCRIPTS = transcripts("responses_")
UPSTREAMS = {"anthropic", "openai"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[TranscriptUpstream]:
    with TranscriptUpstream() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, upstream: TranscriptUpstream
) -> Iterator[ServerThread]:
    with gateway_over(upstream, tmp_path_factory.mktemp("conformance-responses")) as running:
        yield running


def _client(gateway: ServerThread, sent: Sent) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=TOKEN_A, max_retries=0, http_client=sent.client()
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
    create = _client(gateway, sent).responses.with_raw_response.create
    if response["status"] >= 400:
        with pytest.raises(openai.APIStatusError) as raised:
            create(**request)
        got = raised.value.response
    else:
        raw = create(**request)
        got = raw.http_response
        parsed = raw.parse()
        expected_text = "".join(
            part["text"]
            for item in response["json"]["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
        assert parsed.output_text == expected_text  # the SDK reads it as from OpenAI
    received = received_one(upstream, before, transcript["path"])
    expected_up = {**sent.bodies[0], "model": upstream_name(request["model"], UPSTREAMS)}
    assert diff(expected_up, received) == [], "the upstream did not receive the client's body"
    assert got.status_code == response["status"], got.text
    if response["status"] < 400:
        assert got.headers["x-evermind-cache"] == "bypass"
    assert diff(response["json"], got.json()) == []
    # Its Retry-After too (a 503/529 saying when to come back), and none invented.
    assert got.headers.get("retry-after") == response.get("headers", {}).get("retry-after")


@pytest.mark.parametrize(
    "name", sorted(n for n, t in TRANSCRIPTS.items() if "events" in t["response"])
)
def test_a_stream_passes_through_event_for_event(
    gateway: ServerThread, upstream: TranscriptUpstream, name: str
) -> None:
    transcript = TRANSCRIPTS[name]
    request, response = transcript["request"], transcript["response"]
    upstream.reset()
    upstream.answer(response, "openai")
    sent, before = Sent(), len(upstream.requests)
    with _client(gateway, sent).responses.create(**request) as stream:
        got = [event.to_dict() for event in stream]
    received = received_one(upstream, before, transcript["path"])
    expected_up = {**sent.bodies[0], "model": upstream_name(request["model"], UPSTREAMS)}
    assert diff(expected_up, received) == []
    # The SDK's typed events say what the upstream's did (its models read created_at as a
    # float, so equal values, not equal types, here; the bytes below are diffed exactly).
    assert got == [event["data"] for event in response["events"]]
    # On the wire: each event named as the upstream named it, nothing after the last.
    upstream.answer(response, "openai")
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        raw = http.post("/v1/responses", json=request)
    assert raw.headers["x-evermind-cache"] == "bypass"
    blocks = [b for b in raw.text.split("\n\n") if b.strip()]
    named = [
        (b.split("\n")[0].removeprefix("event: "), json.loads(b.split("\n")[1][6:])) for b in blocks
    ]
    assert (
        diff([[e["event"], e["data"]] for e in response["events"]], [list(n) for n in named]) == []
    )
