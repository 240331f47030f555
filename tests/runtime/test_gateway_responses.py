"""``POST /v1/responses`` through the gateway: the official ``openai`` SDK's
``client.responses.create`` against the runtime, whose upstreams are the loopback OpenAI and
Anthropic servers of :mod:`tests.upstreams`.

The body reaches the upstream as sent (``model`` resolved as on chat completions); the JSON
answer and the stream come back as the upstream sent them, marked not cached; a model of a
Messages API upstream is refused in OpenAI's shape; auth, tenants, the rate limit and the
body cap apply; usage and cost reach ``/metrics``; a stream cut or a malformed usage is the
Responses API's own ``error`` event, and nothing is counted as paid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, TOKEN_B, bearer, gateway_config
from tests.upstreams import AnthropicUpstream, OpenAIUpstream, default_reply

OPENAI_KEY = "sk-responses-openai-secret-3e1f07"
ANTHROPIC_KEY = "sk-ant-responses-secret-8c22d4"
MODEL = "openai/gpt-4o-mini"
ALPHA = "t-" + hashlib.sha256(b"alpha").hexdigest()[:12]
BURST = 40


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[OpenAIUpstream, AnthropicUpstream]]:
    with OpenAIUpstream(OPENAI_KEY) as gpt, AnthropicUpstream(ANTHROPIC_KEY) as claude:
        yield gpt, claude


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
    upstreams: tuple[OpenAIUpstream, AnthropicUpstream],
) -> Iterator[ServerThread]:
    gpt, claude = upstreams
    config = gateway_config(
        tmp_path_factory.mktemp("responses"),
        {
            "cache": {"embedder": "terms"},
            "default_upstreams": {"openai": "openai"},
            "upstreams": {
                "openai": {"base_url": gpt.url + "/v1", "api_key": OPENAI_KEY, "max_retries": 0},
                "alphaonly": {
                    "protocol": "openai",
                    "base_url": gpt.url + "/v1",
                    "api_key": OPENAI_KEY,
                    "tenants": ["alpha"],
                    "max_retries": 0,
                },
                "anthropic": {"base_url": claude.url, "api_key": ANTHROPIC_KEY, "max_retries": 0},
            },
        },
    )
    # A small body cap and a rate limit whose burst only the rate-limit test exhausts.
    config = dataclasses.replace(
        config, max_request_bytes=64 * 1024, rate_limit=1.0, rate_burst=BURST
    )
    with ServerThread(config) as running:
        yield running


def client(server: ServerThread, token: str = TOKEN_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=token, max_retries=0)


def metrics(server: ServerThread) -> dict[str, float]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        text = http.get("/metrics").text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("evermind_gateway_") and f'tenant="{ALPHA}",upstream="openai"' in line
    }


def counter(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


LABEL = f'tenant="{ALPHA}",upstream="openai"'


def test_a_text_response_is_the_upstreams_own_and_its_usage_is_counted(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    question = "What is the capital of France?"
    before = metrics(gateway)
    raw = client(gateway).responses.with_raw_response.create(
        model=MODEL,
        input=[{"role": "user", "content": [{"type": "input_text", "text": question}]}],
        instructions="Answer briefly.",
        metadata={"ticket": "42"},
        max_output_tokens=64,
        store=False,
    )
    sent = gpt.last
    assert sent.path == "/v1/responses"
    assert sent.body == {
        "model": "gpt-4o-mini",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": question}]}],
        "instructions": "Answer briefly.",
        "metadata": {"ticket": "42"},
        "max_output_tokens": 64,
        "store": False,
    }
    assert raw.headers["x-evermind-cache"] == "bypass"
    assert raw.headers["x-evermind-cache-reason"] == "responses_api"
    body = raw.http_response.json()
    assert body["model"] == "gpt-4o-mini" and "evermind" not in body  # as the upstream said
    response = raw.parse()
    assert response.output_text == default_reply(question)
    assert response.usage is not None
    after = metrics(gateway)
    paid_in = response.usage.input_tokens - response.usage.input_tokens_details.cached_tokens
    assert counter(before, after, f'evermind_gateway_requests_total{{{LABEL},cache="bypass"}}') == 1
    assert counter(before, after, f'evermind_gateway_tokens_total{{{LABEL},kind="input"}}') == (
        paid_in
    )
    assert counter(before, after, f'evermind_gateway_tokens_total{{{LABEL},kind="output"}}') == (
        response.usage.output_tokens
    )
    assert counter(before, after, f"evermind_gateway_cost_usd_total{{{LABEL}}}") > 0


def test_a_bare_id_goes_to_the_default_openai_upstream(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    response = client(gateway).responses.create(model="gpt-4.1-mini", input="Hi there")
    assert gpt.last.body == {"model": "gpt-4.1-mini", "input": "Hi there"}
    assert response.output_text == default_reply("Hi there")


def test_a_function_call_and_its_output_pass_through(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    tools: Any = [
        {
            "type": "function",
            "name": "weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": False,
        }
    ]
    sdk = client(gateway)
    first = sdk.responses.create(model=MODEL, input="Call weather for Paris", tools=tools)
    call = first.output[0]
    assert call.type == "function_call" and call.name == "weather"
    assert json.loads(call.arguments) == {"query": "Call weather for Paris"}
    assert gpt.last.body["tools"] == tools
    turns: Any = [
        {"role": "user", "content": "Call weather for Paris"},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
    ]
    second = sdk.responses.create(model=MODEL, input=turns, tools=tools)
    assert gpt.last.body["input"] == turns
    assert second.output_text == "Tool said: sunny, 21 C"


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """A text/event-stream body as (event name, data) pairs."""
    out = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            out.append((lines.get("event", ""), json.loads(lines["data"])))
    return out


def test_a_stream_is_relayed_event_for_event_and_counted_at_its_end(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    question = "Stream me a sentence about rivers"
    before = metrics(gateway)
    with client(gateway).responses.create(model=MODEL, input=question, stream=True) as stream:
        got = [event.to_dict() for event in stream]
    assert gpt.last.body == {"model": "gpt-4o-mini", "input": question, "stream": True}
    kinds = [e["type"] for e in got]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in got if e["type"] == "response.output_text.delta")
    assert text == default_reply(question)
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    usage = got[-1]["response"]["usage"]
    after = metrics(gateway)
    assert (
        counter(before, after, f'evermind_gateway_tokens_total{{{LABEL},kind="output"}}')
        == (usage["output_tokens"])
    )
    # The raw bytes name every event as the upstream did (``event: <type>``).
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        raw = http.post("/v1/responses", json={"model": MODEL, "input": question, "stream": True})
    assert raw.headers["x-evermind-cache"] == "bypass"
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert all(name == data["type"] for name, data in _events(raw.text))


def test_a_model_of_a_messages_upstream_is_refused_in_openais_shape(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    _, claude = upstreams
    before = len(claude.requests)
    with pytest.raises(openai.BadRequestError) as raised:
        client(gateway).responses.create(model="anthropic/claude-sonnet-4-5", input="Hi")
    error = raised.value.response.json()["error"]
    assert error["code"] == "unsupported_protocol" and error["type"] == "invalid_request_error"
    assert "'anthropic' protocol" in error["message"] and "/v1/messages" in error["message"]
    assert len(claude.requests) == before  # nothing went upstream


def test_local_and_router_models_are_not_served_here(gateway: ServerThread) -> None:
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        local = http.post("/v1/responses", json={"model": "evermind/none-such", "input": "x"})
        assert local.status_code == 404 and local.json()["error"]["code"] == "model_not_found"
        auto = http.post("/v1/responses", json={"model": "evermind/auto", "input": "x"})
        assert auto.status_code == 400 and auto.json()["error"]["code"] == "unsupported_model"
        broken = http.post(
            "/v1/responses", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"


def test_auth_tenants_and_the_body_cap_apply(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    before = len(gpt.requests)
    with pytest.raises(openai.AuthenticationError):
        client(gateway, "tok-nobody").responses.create(model=MODEL, input="Hi")
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(gateway, TOKEN_B).responses.create(model="alphaonly/gpt-4o-mini", input="Hi")
    assert raised.value.response.json()["error"]["code"] == "upstream_forbidden"
    with pytest.raises(openai.APIStatusError) as too_large:
        client(gateway).responses.create(model=MODEL, input="x" * (80 * 1024))
    assert too_large.value.status_code == 413
    assert len(gpt.requests) == before


def test_the_tenants_rate_limit_applies(gateway: ServerThread) -> None:
    """Bravo spends its burst on refused bodies (no upstream call); the next is a 429."""
    statuses = []
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_B), timeout=30) as http:
        for _ in range(BURST + 5):
            statuses.append(http.post("/v1/responses", json={"input": "no model"}).status_code)
    assert statuses[0] == 400 and 429 in statuses, statuses


def test_an_upstream_refusal_keeps_its_status_and_error_object(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    refusal = {
        "error": {
            "message": "Unknown parameter: 'bogus'.",
            "type": "invalid_request_error",
            "param": "bogus",
            "code": "unknown_parameter",
        }
    }
    gpt.script(400, refusal)
    with pytest.raises(openai.BadRequestError) as raised:
        client(gateway).responses.create(model=MODEL, input="Hi", extra_body={"bogus": 1})
    assert raised.value.response.json() == refusal
    assert gpt.last.body["bogus"] == 1


def test_a_cut_stream_ends_in_the_responses_apis_error_event_and_nothing_is_paid(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    before = metrics(gateway)
    gpt.fail("truncate")
    with client(gateway).responses.create(model=MODEL, input="Cut me off", stream=True) as stream:
        got = [event.to_dict() for event in stream]
    assert got[0]["type"] == "response.created"
    assert got[-1]["type"] == "error" and got[-1]["code"] == "upstream_stream_cut"
    assert got[-1]["sequence_number"] == got[-2]["sequence_number"] + 1
    assert "response.completed" not in [e["type"] for e in got]
    after = metrics(gateway)
    assert (
        counter(
            before, after, f'evermind_gateway_errors_total{{{LABEL},code="upstream_stream_cut"}}'
        )
        == 1
    )
    assert counter(before, after, f'evermind_gateway_tokens_total{{{LABEL},kind="output"}}') == 0


def test_a_hostile_usage_is_refused_and_never_reaches_the_metrics(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    before = metrics(gateway)
    hostile = {"id": "resp_x", "object": "response", "model": "gpt-4o-mini", "output": []}
    gpt.script(200, {**hostile, "usage": {"input_tokens": -5, "output_tokens": 10**30}})
    with pytest.raises(openai.APIStatusError) as raised:
        client(gateway).responses.create(model=MODEL, input="Usage?")
    assert raised.value.status_code == 502
    assert raised.value.response.json()["error"]["code"] == "upstream_malformed"
    after = metrics(gateway)
    assert counter(before, after, f'evermind_gateway_tokens_total{{{LABEL},kind="output"}}') == 0


def test_a_key_the_upstream_echoes_is_scrubbed(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    echoed = {
        "id": "resp_k",
        "object": "response",
        "model": "gpt-4o-mini",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_k",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": f"key {OPENAI_KEY}", "annotations": []}
                ],
            }
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }
    gpt.script(200, echoed)
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        answer = http.post("/v1/responses", json={"model": MODEL, "input": "key?"})
    assert answer.status_code == 200 and OPENAI_KEY not in answer.text
    assert answer.json()["output"][0]["content"][0]["text"] == "key ***"


def test_a_key_split_across_two_stream_deltas_is_scrubbed(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    """The key arrives in two deltas, and a key's first characters end the text: the client
    never sees the key's halves, the text it folds is the scrubbed one, and the events are
    still the upstream's, one for one (the held-back tail rides in the last delta)."""
    gpt, _ = upstreams
    half = len(OPENAI_KEY) // 2
    pieces = ["The key is ", OPENAI_KEY[:half], OPENAI_KEY[half:], " and ", OPENAI_KEY[:6]]
    ident = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    done = {"id": "resp_1", "object": "response", "model": "gpt-4o-mini", "output": []}
    events = [("response.created", {"response": {**done, "status": "in_progress"}})]
    events += [("response.output_text.delta", {**ident, "delta": p}) for p in pieces]
    events += [("response.output_text.done", {**ident, "text": "".join(pieces)})]
    events += [("response.completed", {"response": {**done, "status": "completed"}})]
    gpt.script(
        200,
        events=[
            f"event: {k}\ndata: {json.dumps({'type': k, **d, 'sequence_number': n})}\n\n"
            for n, (k, d) in enumerate(events)
        ],
    )
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        raw = http.post("/v1/responses", json={"model": MODEL, "input": "x", "stream": True})
    got = _events(raw.text)
    assert OPENAI_KEY[:half] not in raw.text and OPENAI_KEY[half:] not in raw.text
    text = "".join(d["delta"] for n, d in got if n == "response.output_text.delta")
    assert text == "The key is *** and " + OPENAI_KEY[:6]
    done_event = next(d for n, d in got if n == "response.output_text.done")
    assert done_event["text"] == text
    assert [n for n, _ in got] == [k for k, _ in events]  # one for one, in order
    assert [d["sequence_number"] for _, d in got] == list(range(len(events)))


def test_the_sdks_stream_helper_folds_the_relayed_events(gateway: ServerThread) -> None:
    """``client.responses.stream`` (the SDK's accumulating helper) reads the relayed events
    into the final response as it would OpenAI's."""
    question = "Fold this stream for me"
    with client(gateway).responses.stream(model=MODEL, input=question) as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == default_reply(question)
    assert final.usage is not None and final.usage.output_tokens > 0


def test_a_streamed_request_the_upstream_fails_keeps_its_status_and_retry_after(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    gpt.fail("overloaded", retry_after=3)
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        body = {"model": MODEL, "input": "Busy?", "stream": True}
        answer = http.post("/v1/responses", json=body)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "3"
    assert answer.json() == {
        "error": {
            "message": "scripted fault: overloaded",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }


def test_an_error_event_of_the_upstream_is_relayed_and_counted(
    gateway: ServerThread, upstreams: tuple[OpenAIUpstream, AnthropicUpstream]
) -> None:
    gpt, _ = upstreams
    before = metrics(gateway)
    gpt.fail("stream_error")
    with client(gateway).responses.create(model=MODEL, input="Fail midway", stream=True) as stream:
        got = [event.to_dict() for event in stream]
    assert got[0]["type"] == "response.created"
    assert got[-1] == {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error mid-stream",
    }
    after = metrics(gateway)
    errors = f'evermind_gateway_errors_total{{{LABEL},code="upstream_unavailable"}}'
    assert counter(before, after, errors) == 1
    assert counter(before, after, f'evermind_gateway_tokens_total{{{LABEL},kind="output"}}') == 0
