"""OpenAIBridge on the official ``openai`` SDK against a loopback Chat Completions server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from evermind.bridges.base import Bridge, ChatRequest, Completion, Message, Usage
from evermind.bridges.openai import OpenAIBridge
from evermind.errors import UpstreamError
from tests.upstreams import OpenAIUpstream, count_tokens, default_reply, drain

T = TypeVar("T")
SYSTEM = "You are a careful assistant who answers in one short sentence."
FACTS = "The user's name is Ada. Ada lives in Lyon."
WEATHER = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gpt() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def fresh(gpt: OpenAIUpstream) -> None:
    gpt.reset()


def call(gpt: OpenAIUpstream, use: Callable[[OpenAIBridge], Awaitable[T]], **options: Any) -> T:
    """Runs ``use`` with a fresh bridge (an SDK client lives on one event loop)."""

    async def main() -> T:
        bridge = OpenAIBridge(
            api_key=options.pop("api_key", gpt.api_key),
            base_url=gpt.url + "/v1",
            max_retries=options.pop("max_retries", 0),
            **options,
        )
        try:
            return await use(bridge)
        finally:
            await bridge.aclose()

    return asyncio.run(main())


def ask(text: str, **fields: Any) -> ChatRequest:
    return ChatRequest(model="gpt-4.1-mini", messages=(Message("user", text),), **fields)


async def _once(bridge: OpenAIBridge, request: ChatRequest, streamed: bool) -> Completion:
    if streamed:
        return (await drain(bridge.stream(request)))[1]
    return await bridge.generate(request)


def test_generate(gpt: OpenAIUpstream) -> None:
    done = call(gpt, lambda b: b.generate(ask("What is the capital of France?")))
    assert done.text == default_reply("What is the capital of France?")
    assert done.provider == "openai" and done.model == "gpt-4.1-mini"
    assert done.finish_reason == "stop" and done.id.startswith("chatcmpl-")
    words = count_tokens("What is the capital of France?")
    assert done.usage == Usage(input_tokens=words, output_tokens=count_tokens(done.text))
    body = gpt.last.body
    assert body["messages"] == [{"role": "user", "content": "What is the capital of France?"}]
    assert body["max_tokens"] == 512 and "stream" not in body


def test_stream_matches_generate_and_asks_for_usage(gpt: OpenAIUpstream) -> None:
    request = ask("Tell me about the fox.", system=SYSTEM)
    whole = call(gpt, lambda b: b.generate(request))
    texts, done = call(gpt, lambda b: drain(b.stream(request)))
    assert len(texts) > 1 and "".join(texts) == whole.text == done.text
    assert done.finish_reason == whole.finish_reason == "stop"
    assert done.usage.output_tokens == whole.usage.output_tokens
    assert done.usage.prompt_tokens == whole.usage.prompt_tokens
    assert gpt.last.body["stream"] is True
    assert gpt.last.body["stream_options"] == {"include_usage": True}


def test_last_usage_is_the_last_calls(gpt: OpenAIUpstream) -> None:
    async def use(bridge: OpenAIBridge) -> None:
        assert bridge.last_usage is None
        first = await bridge.generate(ask("hello"))
        assert bridge.last_usage == first.usage
        second = (await drain(bridge.stream(ask("one two three four"))))[1]
        assert bridge.last_usage == second.usage != first.usage

    call(gpt, use)


def test_multi_turn(gpt: OpenAIUpstream) -> None:
    request = ChatRequest(
        model="gpt-4.1",
        messages=(
            Message("user", "My name is Ada."),
            Message("assistant", "Nice to meet you, Ada."),
            Message("user", "What is my name?"),
        ),
        max_tokens=64,
        temperature=0.0,
        stop=("\n\n",),
        extra={"seed": 5, "top_p": 0.5},
    )
    done = call(gpt, lambda b: b.generate(request))
    assert done.text == default_reply("What is my name?")
    body = gpt.last.body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["max_tokens"] == 64 and body["temperature"] == 0.0
    assert body["stop"] == ["\n\n"] and body["seed"] == 5 and body["top_p"] == 0.5


def test_system_first_then_facts(gpt: OpenAIUpstream) -> None:
    first = call(gpt, lambda b: b.generate(ask("Where do I live?", system=SYSTEM, facts=FACTS)))
    assert gpt.last.body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "system", "content": FACTS},
        {"role": "user", "content": "Where do I live?"},
    ]
    assert first.usage.cache_read_tokens == 0
    # New facts: the stable system message is still a cached prefix.
    changed = "The user's name is Ada. Ada moved to Paris."
    second = call(gpt, lambda b: b.generate(ask("Where do I live?", system=SYSTEM, facts=changed)))
    prompt = count_tokens(SYSTEM) + count_tokens(changed) + count_tokens("Where do I live?")
    assert second.usage == Usage(
        input_tokens=prompt - count_tokens(SYSTEM),
        output_tokens=count_tokens(second.text),
        cache_read_tokens=count_tokens(SYSTEM),
    )
    streamed = call(
        gpt, lambda b: drain(b.stream(ask("Where do I live?", system=SYSTEM, facts=changed)))
    )[1]
    assert streamed.usage.cache_read_tokens == prompt and streamed.usage.input_tokens == 0


def test_tools_passed_through_and_calls_parsed(gpt: OpenAIUpstream) -> None:
    request = ask("Use weather for Lyon", tools=(WEATHER,))
    done = call(gpt, lambda b: b.generate(request))
    assert gpt.last.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather in a city.",
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert done.finish_reason == "tool_calls" and done.text == ""
    (tool_call,) = done.tool_calls
    assert tool_call.name == "weather" and tool_call.arguments == {"query": "Use weather for Lyon"}
    assert tool_call.id.startswith("call_")
    streamed = call(gpt, lambda b: drain(b.stream(request)))[1]
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        ("weather", tool_call.arguments)
    ]
    assert streamed.finish_reason == "tool_calls"
    follow = ChatRequest(
        model="gpt-4.1",
        messages=(
            Message("user", "Use weather for Lyon"),
            Message("assistant", "", tool_calls=(tool_call,)),
            Message("tool", "Sunny, 24 C", tool_call_id=tool_call.id),
        ),
        tools=(WEATHER,),
    )
    answer = call(gpt, lambda b: b.generate(follow))
    assert answer.text == "Tool said: Sunny, 24 C"
    sent = gpt.last.body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": tool_call.id,
                "type": "function",
                "function": {"name": "weather", "arguments": json.dumps(tool_call.arguments)},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "tool_call_id": tool_call.id, "content": "Sunny, 24 C"}


def test_max_tokens_reports_length(gpt: OpenAIUpstream) -> None:
    done = call(gpt, lambda b: b.generate(ask("one two three four five", max_tokens=3)))
    assert done.finish_reason == "length" and done.usage.output_tokens == 3


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("fault", "code", "status"),
    [
        ("rate_limit", "upstream_rate_limited", 429),
        ("server_error", "upstream_unavailable", 500),
        ("overloaded", "upstream_unavailable", 503),
        ("auth", "upstream_auth", 401),
    ],
)
def test_http_errors(
    gpt: OpenAIUpstream, fault: str, code: str, status: int, streamed: bool
) -> None:
    gpt.fail(fault, retry_after=7)
    with pytest.raises(UpstreamError) as caught:
        call(gpt, lambda b: _once(b, ask("hello"), streamed))
    error = caught.value
    assert (error.code, error.status, error.provider) == (code, status, "openai")
    assert error.retry_after == (7.0 if fault in ("rate_limit", "overloaded") else None)
    assert len(gpt.requests) == 1  # max_retries=0: no retry


def test_invalid_key(gpt: OpenAIUpstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        call(gpt, lambda b: b.generate(ask("hello")), api_key="sk-wrong")
    assert caught.value.code == "upstream_auth" and caught.value.status == 401
    assert "Incorrect API key" in str(caught.value)


@pytest.mark.parametrize("fault", ["cut", "truncate"])
def test_stream_cut_halfway(gpt: OpenAIUpstream, fault: str) -> None:
    gpt.fail(fault)
    with pytest.raises(UpstreamError) as caught:
        call(gpt, lambda b: drain(b.stream(ask("a long enough question to stream"))))
    assert caught.value.code == "upstream_stream_cut" and caught.value.status is None


def test_cut_response_body(gpt: OpenAIUpstream) -> None:
    gpt.fail("cut")
    with pytest.raises(UpstreamError) as caught:
        call(gpt, lambda b: b.generate(ask("hello")))
    assert caught.value.code == "upstream_unavailable" and caught.value.status is None


def test_unreachable() -> None:
    async def main() -> None:
        bridge = OpenAIBridge(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0)
        await bridge.generate(ask("hello"))

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(main())
    assert caught.value.code == "upstream_unavailable"


@pytest.mark.parametrize("streamed", [False, True])
def test_retries_recover_from_one_429(gpt: OpenAIUpstream, streamed: bool) -> None:
    gpt.fail("rate_limit", retry_after=0.1)
    done = call(gpt, lambda b: _once(b, ask("hello again"), streamed), max_retries=1)
    assert done.text == default_reply("hello again")
    assert len(gpt.requests) == 2
    assert gpt.requests[1].headers["x-stainless-retry-count"] == "1"


def test_provider_name_is_carried(gpt: OpenAIUpstream) -> None:
    done = call(gpt, lambda b: b.generate(ask("hello")), provider="evermind")
    assert done.provider == "evermind"
    gpt.fail("server_error")
    with pytest.raises(UpstreamError) as caught:
        call(gpt, lambda b: b.generate(ask("hello")), provider="evermind")
    assert caught.value.provider == "evermind"


def test_error_inside_a_stream(gpt: OpenAIUpstream) -> None:
    gpt.fail("stream_error")
    with pytest.raises(UpstreamError) as caught:
        call(gpt, lambda b: drain(b.stream(ask("a long enough question to stream"))))
    assert caught.value.code == "upstream_unavailable" and caught.value.status is None
    assert "error" in str(caught.value)


def test_it_is_a_bridge(gpt: OpenAIUpstream) -> None:
    async def check(bridge: Any) -> None:
        assert isinstance(bridge, Bridge)

    call(gpt, check)


def test_a_response_that_is_not_json_is_an_upstream_error() -> None:
    """``generate`` reads the raw body itself: a 200 that is not a JSON object is refused."""
    import httpx2
    import openai

    async def main(body: str) -> UpstreamError:
        transport = httpx2.MockTransport(lambda _request: httpx2.Response(200, text=body))
        client = openai.AsyncOpenAI(
            api_key="sk-test",
            base_url="http://upstream.invalid/v1",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport),
        )
        try:
            with pytest.raises(UpstreamError) as caught:
                await OpenAIBridge(client=client).generate(ask("hi"))
        finally:
            await client.close()
        return caught.value

    for body, words in (("<html>busy</html>", "not JSON"), ("[1, 2]", "must be an object")):
        err = asyncio.run(main(body))
        assert err.code == "upstream_malformed" and words in str(err), str(err)
