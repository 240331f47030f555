"""wire.py: the request bodies, and response/stream parsing checked against the SDKs' own."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from evermind.bridges import answers, streams, wire
from evermind.bridges.base import ChatRequest, Message, ToolCall, Usage
from evermind.errors import InputError, UpstreamError

TOOL = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = ToolCall("toolu_01", "weather", {"city": "Lyon"})


def request(**fields: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", "hi"),), **fields)


# --- request bodies ------------------------------------------------------------------


def test_anthropic_body_two_breakpoints_and_fields() -> None:
    body = wire.anthropic_body(
        request(system="S", facts="F", temperature=0.2, stop=("X",), tools=(TOOL,), max_tokens=9),
        stream=True,
    )
    assert body["system"] == [
        {"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "F", "cache_control": {"type": "ephemeral"}},
    ]
    assert body["tools"] == [TOOL] and body["stop_sequences"] == ["X"]
    assert body["temperature"] == 0.2 and body["max_tokens"] == 9 and body["stream"] is True
    assert "system" not in wire.anthropic_body(request())
    assert len(wire.anthropic_body(request(facts="F only"))["system"]) == 1
    cached_tool = {**TOOL, "cache_control": {"type": "ephemeral"}}
    assert wire.anthropic_body(request(tools=(cached_tool,)))["tools"] == [cached_tool]


def test_anthropic_tool_turns() -> None:
    second = ToolCall("toolu_02", "weather", {"city": "Nice"})
    body = wire.anthropic_body(
        ChatRequest(
            model="m",
            messages=(
                Message("user", "weather in Lyon and Nice?"),
                Message("assistant", "Checking.", tool_calls=(CALL, second)),
                Message("tool", "Sunny", tool_call_id="toolu_01"),
                Message("tool", "Rain", tool_call_id="toolu_02"),
            ),
        )
    )
    assistant, results = body["messages"][1:]
    assert assistant["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Lyon"}},
        {"type": "tool_use", "id": "toolu_02", "name": "weather", "input": {"city": "Nice"}},
    ]
    assert results == {  # both results in one user turn, as the API requires
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "Rain"},
        ],
    }
    with pytest.raises(InputError, match="tool_call_id"):
        wire.anthropic_body(ChatRequest(model="m", messages=(Message("tool", "x"),)))


def test_openai_body_system_first_tools_and_usage_chunk() -> None:
    body = wire.openai_body(
        ChatRequest(
            model="m",
            messages=(
                Message("user", "weather?"),
                Message("assistant", "", tool_calls=(CALL,)),
                Message("tool", "Sunny", tool_call_id="toolu_01"),
            ),
            system="S",
            facts="F",
            tools=(TOOL,),
            extra={"seed": 3},
        ),
        stream=True,
    )
    assert body["messages"][:2] == [
        {"role": "system", "content": "S"},
        {"role": "system", "content": "F"},
    ]
    assert body["messages"][3]["tool_calls"] == [
        {
            "id": "toolu_01",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Lyon"}'},
        }
    ]
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny"}
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": TOOL["input_schema"],
            "description": "The weather in a city.",
        },
    }
    assert body["stream_options"] == {"include_usage": True} and body["seed"] == 3
    assert "stream_options" not in wire.openai_body(request())


def test_a_tool_without_a_name_is_refused() -> None:
    with pytest.raises(InputError, match="name"):
        wire.openai_body(request(tools=({"description": "x"},)))


# --- responses, checked against the SDKs' models -------------------------------------

ANTHROPIC_MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Lyon"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "output_tokens": 30,
        "cache_creation_input_tokens": 1500,
        "cache_read_input_tokens": 2048,
    },
}


def test_anthropic_completion_matches_the_sdk_model() -> None:
    ours = wire.anthropic_completion(ANTHROPIC_MESSAGE)
    via_sdk = wire.anthropic_completion(
        anthropic.types.Message.model_validate(ANTHROPIC_MESSAGE).model_dump(mode="json")
    )
    assert ours == via_sdk
    assert ours.usage == Usage(12, 30, cache_read_tokens=2048, cache_write_tokens=1500)
    assert ours.text == "Let me check." and ours.finish_reason == "tool_calls"
    assert ours.tool_calls == (CALL,)


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


ANTHROPIC_EVENTS = [
    (
        "message_start",
        {
            "message": {
                **ANTHROPIC_MESSAGE,
                "content": [],
                "stop_reason": None,
                "usage": {**ANTHROPIC_MESSAGE["usage"], "output_tokens": 1},
            }
        },
    ),
    ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
    ("ping", {}),
    ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Let me"}}),
    ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": " check."}}),
    ("content_block_stop", {"index": 0}),
    (
        "content_block_start",
        {
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {}},
        },
    ),
    (
        "content_block_delta",
        {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
    ),
    (
        "content_block_delta",
        {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '"Lyon"}'}},
    ),
    ("content_block_stop", {"index": 1}),
    (
        "message_delta",
        {
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 30},
        },
    ),
    ("message_stop", {}),
]


def test_anthropic_stream_matches_the_sdks_accumulation() -> None:
    state = streams.AnthropicStream()
    texts = [state.feed({"type": kind, **data}) for kind, data in ANTHROPIC_EVENTS]
    assert "".join(texts) == "Let me check." and state.done
    snapshot = None
    buffers: dict[int, bytes] = {}
    for kind, data in ANTHROPIC_EVENTS:
        if kind == "ping":
            continue  # the SDK's stream drops pings before accumulating
        event: Any = {"type": kind, **data}
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    assert state.completion() == wire.anthropic_completion(snapshot.model_dump(mode="json"))
    assert state.completion().usage == Usage(12, 30, 2048, 1500)


def test_anthropic_stream_error_event() -> None:
    state = streams.AnthropicStream()
    with pytest.raises(UpstreamError) as caught:
        state.feed(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    assert caught.value.code == "upstream_unavailable" and "Overloaded" in str(caught.value)


OPENAI_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Lyon"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 2100,
        "completion_tokens": 17,
        "total_tokens": 2117,
        "prompt_tokens_details": {"cached_tokens": 1920},
    },
}


def test_openai_completion_matches_the_sdk_model() -> None:
    ours = wire.openai_completion(OPENAI_RESPONSE)
    via_sdk = wire.openai_completion(
        ChatCompletion.model_validate(OPENAI_RESPONSE).model_dump(mode="json")
    )
    assert ours == via_sdk
    assert ours.usage == Usage(input_tokens=180, output_tokens=17, cache_read_tokens=1920)
    assert ours.tool_calls == (ToolCall("call_1", "weather", {"city": "Lyon"}),)
    assert ours.finish_reason == "tool_calls" and ours.text == ""


def _chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **more,
    }


OPENAI_CHUNKS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Hello"}),
    _chunk({"content": " there"}),
    _chunk({}, "stop"),
    {
        **_chunk({}),
        "choices": [],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 2,
            "total_tokens": 52,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    },
]


def test_openai_stream_matches_the_sdks_accumulation() -> None:
    state = streams.OpenAIStream()
    assert "".join(state.feed(chunk) for chunk in OPENAI_CHUNKS) == "Hello there"
    assert not state.done and state.finished
    state.finish()
    sdk = ChatCompletionStreamState()
    for chunk in OPENAI_CHUNKS:
        list(sdk.handle_chunk(ChatCompletionChunk.model_validate(chunk)))
    final = sdk.get_final_completion()
    ours = state.completion()
    assert ours.text == final.choices[0].message.content
    assert ours.finish_reason == final.choices[0].finish_reason
    assert final.usage is not None
    assert ours.usage == wire.openai_usage(final.usage.model_dump(mode="json"))
    assert ours.usage == Usage(input_tokens=18, output_tokens=2, cache_read_tokens=32)


def test_openai_stream_tool_call_pieces() -> None:
    chunks = [
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "weather", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "Lyon"}'}}]}),
        _chunk({}, "tool_calls"),
    ]
    state = streams.OpenAIStream()
    for chunk in chunks:
        state.feed(chunk)
    done = state.completion()
    assert done.tool_calls == (ToolCall("call_9", "weather", {"city": "Lyon"}),)
    assert done.finish_reason == "tool_calls"


# --- server-sent events --------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_sse_parser_agrees_with_the_sdk_decoder(step: int) -> None:
    raw = "".join(_sse(kind, data) for kind, data in ANTHROPIC_EVENTS)
    raw += ": a comment\r\n\r\ndata: [DONE]\r\n\r\n"
    parser = streams.SSEParser()
    ours = []
    for start in range(0, len(raw), step):
        ours += [(e.event, e.data) for e in parser.feed(raw[start : start + step])]
    pieces = [raw.encode()[i : i + step] for i in range(0, len(raw.encode()), step)]
    theirs = [(e.event or "", e.data) for e in AnthropicSSEDecoder().iter_bytes(iter(pieces))]
    assert ours == theirs
    assert ours[-1] == ("", "[DONE]") and ours[0][0] == "message_start"


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "upstream_bad_request"),
        (401, "upstream_auth"),
        (403, "upstream_auth"),
        (404, "upstream_bad_request"),
        (408, "upstream_unavailable"),
        (429, "upstream_rate_limited"),
        (500, "upstream_unavailable"),
        (529, "upstream_unavailable"),
        (None, "upstream_unavailable"),
    ],
)
def test_error_codes(status: int | None, code: str) -> None:
    assert answers.error_code(status) == code


def test_upstream_error_reads_both_bodies_and_retry_after() -> None:
    anthropic_body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    error = answers.upstream_error("anthropic", 429, {"Retry-After": "12"}, anthropic_body)
    assert (error.code, error.status, error.retry_after) == ("upstream_rate_limited", 429, 12.0)
    assert "slow" in str(error) and error.provider == "anthropic"
    inner = {"message": "Incorrect API key", "type": "invalid_request_error"}  # openai's err.body
    assert "Incorrect API key" in str(answers.upstream_error("openai", 401, {}, inner))
    assert answers.retry_after({"retry-after-ms": "250"}) == 0.25
    assert answers.retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert answers.upstream_error("openai", 502, {}, "<html>bad gateway</html>").code == (
        "upstream_unavailable"
    )


def test_a_5xx_keeps_its_error_object_only_in_its_providers_own_shape() -> None:
    """What decides whether a client gets the upstream's 5xx (its error object kept) or the
    gateway's 502 (none kept): the whole body, in the bridge's protocol's error shape."""
    openai_body = {"error": {"message": "down", "type": "server_error", "param": None}}
    anthropic_body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    kept = answers.upstream_error("openai", 503, {"retry-after": "2"}, openai_body, shape="openai")
    assert kept.reported == {"type": "server_error", "message": "down", "param": None, "code": None}
    assert kept.retry_after == 2.0 and kept.status == 503
    claude = answers.upstream_error("anthropic", 529, {}, anthropic_body, shape="anthropic")
    assert claude.reported is not None and claude.reported["type"] == "overloaded_error"
    refused = [
        ("anthropic", openai_body),  # no "type": "error" envelope
        ("openai", {"message": "down"}),  # no "error" object
        ("openai", {"error": {"message": ""}}),
        ("openai", "<html>down</html>"),
        ("openai", [openai_body]),
        (None, openai_body),  # a bridge that names no shape
    ]
    for shape, body in refused:
        assert answers.upstream_error("p", 500, {}, body, shape=shape).reported is None, body
    # Below 500 nothing changes: a refusal keeps its error object as before.
    assert answers.upstream_error("openai", 400, {}, {"message": "bad"}).reported is not None


def test_sdk_arguments_split() -> None:
    client = anthropic.AsyncAnthropic(api_key="k")
    accepted = wire.sdk_arguments(client.messages.create)
    core, extra = wire.split_arguments({"model": "m", "temperature": 0.1, "top_k": 3}, accepted)
    assert core == {"model": "m"} or "temperature" in core  # SDK versions differ
    assert set(core) | set(extra) == {"model", "temperature", "top_k"}
    assert "extra_body" not in accepted
    assert "messages" in wire.sdk_arguments(openai.AsyncOpenAI(api_key="k").chat.completions.create)
