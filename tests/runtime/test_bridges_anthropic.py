"""AnthropicBridge on the official ``anthropic`` SDK against a loopback Messages API server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from evermind.bridges.anthropic import AnthropicBridge
from evermind.bridges.base import Bridge, ChatRequest, Completion, Message, Usage
from evermind.errors import UpstreamError
from tests.upstreams import AnthropicUpstream, count_tokens, default_reply, drain

T = TypeVar("T")
SYSTEM = "You are a careful assistant who answers in one short sentence."
FACTS = "The user's name is Ada. Ada lives in Lyon."
WEATHER = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicUpstream]:
    with AnthropicUpstream() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def fresh(claude: AnthropicUpstream) -> None:
    claude.reset()


def call(
    claude: AnthropicUpstream, use: Callable[[AnthropicBridge], Awaitable[T]], **options: Any
) -> T:
    """Runs ``use`` with a fresh bridge (an SDK client lives on one event loop)."""

    async def main() -> T:
        bridge = AnthropicBridge(
            api_key=options.pop("api_key", claude.api_key),
            base_url=claude.url,
            max_retries=options.pop("max_retries", 0),
            **options,
        )
        try:
            return await use(bridge)
        finally:
            await bridge.aclose()

    return asyncio.run(main())


def ask(text: str, **fields: Any) -> ChatRequest:
    return ChatRequest(model="claude-sonnet-4-5", messages=(Message("user", text),), **fields)


def test_generate(claude: AnthropicUpstream) -> None:
    done = call(claude, lambda b: b.generate(ask("What is the capital of France?")))
    assert done.text == default_reply("What is the capital of France?")
    assert done.provider == "anthropic" and done.model == "claude-sonnet-4-5"
    assert done.finish_reason == "stop" and done.id.startswith("msg_")
    words = count_tokens("What is the capital of France?")
    assert done.usage == Usage(input_tokens=words, output_tokens=count_tokens(done.text))
    body = claude.last.body
    assert body["messages"] == [{"role": "user", "content": "What is the capital of France?"}]
    assert "system" not in body and "stream" not in body


def test_stream_matches_generate(claude: AnthropicUpstream) -> None:
    request = ask("Tell me about the fox.", system=SYSTEM)
    whole = call(claude, lambda b: b.generate(request))
    texts, done = call(claude, lambda b: drain(b.stream(request)))
    assert len(texts) > 1 and "".join(texts) == whole.text == done.text
    assert done.finish_reason == whole.finish_reason == "stop"
    assert done.usage.output_tokens == whole.usage.output_tokens
    assert claude.last.body["stream"] is True


def test_last_usage_is_the_last_calls(claude: AnthropicUpstream) -> None:
    async def use(bridge: AnthropicBridge) -> None:
        assert bridge.last_usage is None
        first = await bridge.generate(ask("hello"))
        assert bridge.last_usage == first.usage
        second = (await drain(bridge.stream(ask("one two three four"))))[1]
        assert bridge.last_usage == second.usage != first.usage

    call(claude, use)


def test_multi_turn(claude: AnthropicUpstream) -> None:
    request = ChatRequest(
        model="claude-haiku-4-5",
        messages=(
            Message("user", "My name is Ada."),
            Message("assistant", "Nice to meet you, Ada."),
            Message("user", "What is my name?"),
        ),
        max_tokens=64,
        temperature=0.0,
        stop=("\n\n",),
        extra={"top_k": 5},
    )
    done = call(claude, lambda b: b.generate(request))
    assert done.text == default_reply("What is my name?")
    body = claude.last.body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["max_tokens"] == 64 and body["temperature"] == 0.0
    assert body["stop_sequences"] == ["\n\n"] and body["top_k"] == 5


def test_system_and_facts_are_two_breakpoints(claude: AnthropicUpstream) -> None:
    first = call(claude, lambda b: b.generate(ask("Where do I live?", system=SYSTEM, facts=FACTS)))
    assert claude.last.body["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": FACTS, "cache_control": {"type": "ephemeral"}},
    ]
    system, facts = count_tokens(SYSTEM), count_tokens(FACTS)
    assert first.usage.cache_write_tokens == system + facts
    assert first.usage.cache_read_tokens == 0
    # New facts: the system prefix is still read from the cache; only the facts are written.
    changed = "The user's name is Ada. Ada moved to Paris."
    second = call(
        claude, lambda b: b.generate(ask("Where do I live?", system=SYSTEM, facts=changed))
    )
    assert second.usage == Usage(
        input_tokens=count_tokens("Where do I live?"),
        output_tokens=count_tokens(second.text),
        cache_read_tokens=system,
        cache_write_tokens=count_tokens(changed),
    )
    streamed = call(
        claude, lambda b: drain(b.stream(ask("Where do I live?", system=SYSTEM, facts=changed)))
    )[1]
    assert streamed.usage.cache_read_tokens == system + count_tokens(changed)
    assert streamed.usage.cache_write_tokens == 0


def test_tools_passed_through_and_calls_parsed(claude: AnthropicUpstream) -> None:
    request = ask("Use weather for Lyon", tools=(WEATHER,))
    done = call(claude, lambda b: b.generate(request))
    assert claude.last.body["tools"] == [WEATHER]
    assert done.finish_reason == "tool_calls" and done.text == ""
    (tool_call,) = done.tool_calls
    assert tool_call.name == "weather" and tool_call.arguments == {"query": "Use weather for Lyon"}
    assert tool_call.id.startswith("toolu_")
    streamed = call(claude, lambda b: drain(b.stream(request)))[1]
    assert streamed.tool_calls[0].arguments == tool_call.arguments
    assert streamed.finish_reason == "tool_calls"
    # The result goes back as a tool_result block of a user turn, after the tool_use turn.
    follow = ChatRequest(
        model="claude-sonnet-4-5",
        messages=(
            Message("user", "Use weather for Lyon"),
            Message("assistant", "", tool_calls=(tool_call,)),
            Message("tool", "Sunny, 24 C", tool_call_id=tool_call.id),
        ),
        tools=(WEATHER,),
    )
    answer = call(claude, lambda b: b.generate(follow))
    assert answer.text == "Tool said: Sunny, 24 C"
    sent = claude.last.body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": tool_call.id,
                "name": "weather",
                "input": tool_call.arguments,
            }
        ],
    }
    assert sent[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_call.id, "content": "Sunny, 24 C"}],
    }
    assert follow.has_tool_results()


def test_max_tokens_reports_length(claude: AnthropicUpstream) -> None:
    done = call(claude, lambda b: b.generate(ask("one two three four five", max_tokens=3)))
    assert done.finish_reason == "length" and done.usage.output_tokens == 3


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("fault", "code", "status"),
    [
        ("rate_limit", "upstream_rate_limited", 429),
        ("server_error", "upstream_unavailable", 500),
        ("overloaded", "upstream_unavailable", 529),
        ("auth", "upstream_auth", 401),
    ],
)
def test_http_errors(
    claude: AnthropicUpstream, fault: str, code: str, status: int, streamed: bool
) -> None:
    claude.fail(fault, retry_after=7)
    with pytest.raises(UpstreamError) as caught:
        call(claude, lambda b: _once(b, ask("hello"), streamed))
    error = caught.value
    assert (error.code, error.status, error.provider) == (code, status, "anthropic")
    assert error.retry_after == (7.0 if fault in ("rate_limit", "overloaded") else None)
    assert len(claude.requests) == 1  # max_retries=0: no retry


def test_invalid_key(claude: AnthropicUpstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        call(claude, lambda b: b.generate(ask("hello")), api_key="sk-wrong")
    assert caught.value.code == "upstream_auth" and caught.value.status == 401
    assert "invalid x-api-key" in str(caught.value)


@pytest.mark.parametrize("fault", ["cut", "truncate"])
def test_stream_cut_halfway(claude: AnthropicUpstream, fault: str) -> None:
    claude.fail(fault)
    with pytest.raises(UpstreamError) as caught:
        call(claude, lambda b: drain(b.stream(ask("a long enough question to stream"))))
    assert caught.value.code == "upstream_stream_cut" and caught.value.status is None


def test_cut_response_body(claude: AnthropicUpstream) -> None:
    claude.fail("cut")
    with pytest.raises(UpstreamError) as caught:
        call(claude, lambda b: b.generate(ask("hello")))
    assert caught.value.code == "upstream_unavailable" and caught.value.status is None


def test_unreachable() -> None:
    async def main() -> None:
        bridge = AnthropicBridge(api_key="k", base_url="http://127.0.0.1:9", max_retries=0)
        await bridge.generate(ask("hello"))

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(main())
    assert caught.value.code == "upstream_unavailable"


@pytest.mark.parametrize("streamed", [False, True])
def test_retries_recover_from_one_429(claude: AnthropicUpstream, streamed: bool) -> None:
    claude.fail("rate_limit", retry_after=0.1)
    done = call(claude, lambda b: _once(b, ask("hello again"), streamed), max_retries=1)
    assert done.text == default_reply("hello again")
    assert len(claude.requests) == 2
    assert claude.requests[1].headers["x-stainless-retry-count"] == "1"


async def _once(bridge: AnthropicBridge, request: ChatRequest, streamed: bool) -> Completion:
    if streamed:
        return (await drain(bridge.stream(request)))[1]
    return await bridge.generate(request)


def test_error_inside_a_stream(claude: AnthropicUpstream) -> None:
    claude.fail("stream_error")
    with pytest.raises(UpstreamError) as caught:
        call(claude, lambda b: drain(b.stream(ask("a long enough question to stream"))))
    assert caught.value.code == "upstream_unavailable" and caught.value.status is None
    assert "error" in str(caught.value)


def test_it_is_a_bridge(claude: AnthropicUpstream) -> None:
    async def check(bridge: Any) -> None:
        assert isinstance(bridge, Bridge)

    call(claude, check)
