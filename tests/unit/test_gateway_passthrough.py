"""The pieces of the gateway's pass-through, without a server: the wire bodies of a passed
request, ``max_tokens`` left to the upstream, the upstreams file's ``[default_upstreams]`` and
``default_max_tokens``, Anthropic-shaped errors, and the early usage a stream delta carries
through the key scrubber."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import AsyncIterator

import pytest

from evermind.bridges.answers import upstream_error
from evermind.bridges.base import ChatRequest, Completion, Delta, Message, Passthrough, Usage
from evermind.bridges.redacting import RedactingBridge
from evermind.bridges.wire import anthropic_body, openai_body
from evermind.errors import ConfigError
from evermind.runtime.errors import error_body, provider_body, shaped
from evermind.runtime.gateway.config import DEFAULT_TRANSLATED_MAX_TOKENS, GatewayConfig

HELLO = (Message("user", "Hello"),)


def _passed(protocol: str, body: dict[str, object]) -> ChatRequest:
    return ChatRequest(
        model="claude-x", messages=HELLO, max_tokens=None, passthrough=Passthrough(protocol, body)
    )


def test_a_passed_messages_body_goes_as_sent_with_the_upstreams_model() -> None:
    body = {
        "model": "anthropic/claude-x",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
        "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "stream": False,
    }
    sent = anthropic_body(_passed("anthropic", body))
    assert sent == {**{k: v for k, v in body.items() if k != "stream"}, "model": "claude-x"}
    streamed = anthropic_body(_passed("anthropic", body), stream=True)
    assert streamed["stream"] is True and streamed["thinking"] == body["thinking"]
    assert body["model"] == "anthropic/claude-x"  # the client's body is not changed


def test_a_passed_chat_body_keeps_its_fields_and_asks_a_stream_for_usage() -> None:
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "developer", "content": "Be brief."}],
        "logit_bias": {"50256": -100},
        "stream": True,
        "stream_options": {"include_obfuscation": False},
    }
    plain = openai_body(_passed("openai", body))
    assert "stream" not in plain and "stream_options" not in plain
    assert plain["logit_bias"] == body["logit_bias"] and "max_tokens" not in plain
    streamed = openai_body(_passed("openai", body), stream=True)
    assert streamed["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_a_body_of_the_other_protocol_is_ignored_and_none_max_tokens_is_left_out() -> None:
    request = _passed("openai", {"model": "m", "messages": [], "logit_bias": {}})
    assert anthropic_body(request) == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "Hello"}],
    }
    assert openai_body(ChatRequest(model="m", messages=HELLO, max_tokens=None)) == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hello"}],
    }
    with pytest.raises(Exception, match="max_tokens must be >= 1"):
        ChatRequest(model="m", messages=HELLO, max_tokens=0)


def _config(**extra: object) -> GatewayConfig:
    raw: dict[str, object] = {
        "upstreams": {
            "anthropic": {"api_key": "k"},
            "vllm": {"protocol": "openai", "base_url": "http://x/v1", "api_key": "k"},
        },
        **extra,
    }
    return GatewayConfig.parse(raw, "upstreams.toml", {})


def test_default_upstreams_fall_back_to_the_protocols_namesake() -> None:
    assert _config().default_upstreams == {"anthropic": "anthropic"}
    chosen = _config(default_upstreams={"openai": "vllm"}).default_upstreams
    assert chosen == {"anthropic": "anthropic", "openai": "vllm"}
    assert _config().upstreams["anthropic"].default_max_tokens == DEFAULT_TRANSLATED_MAX_TOKENS


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"default_upstreams": {"openai": "nowhere"}}, "'nowhere' is not an upstream"),
        ({"default_upstreams": {"bedrock": "vllm"}}, "unknown field(s) ['bedrock']"),
    ],
)
def test_a_bad_default_upstream_is_refused_by_name(extra: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _config(**extra)
    assert words in str(raised.value)


def test_a_bad_default_max_tokens_is_refused() -> None:
    raw = {"upstreams": {"anthropic": {"api_key": "k", "default_max_tokens": 0}}}
    with pytest.raises(ConfigError, match="default_max_tokens must be an int >= 1, got 0"):
        GatewayConfig.parse(raw, "u.toml", {})


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (429, "rate_limit_error"),
        (502, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_errors_on_the_messages_routes_have_anthropics_shape(status: int, kind: str) -> None:
    body = error_body("what went wrong", "whatever", "some_code")
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        assert shaped(path, status, body) == {
            "type": "error",
            "error": {"type": kind, "message": "what went wrong", "code": "some_code"},
        }
    assert shaped("/v1/chat/completions", status, body) is body


class _EarlyUsage:
    """A bridge whose stream reports its input usage before any text (Anthropic's order)."""

    provider = "anthropic"
    last_usage = None

    async def generate(self, request: ChatRequest) -> Completion:
        raise AssertionError("not called")

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        yield Delta(usage=Usage(input_tokens=472, cache_read_tokens=9))
        yield Delta(text="Hi")
        yield Delta(completion=Completion(text="Hi", model="m", provider="anthropic"))

    async def aclose(self) -> None:
        return None


def test_the_early_usage_passes_the_key_scrubber() -> None:
    async def deltas() -> list[Delta]:
        bridge = RedactingBridge(_EarlyUsage(), ["sk-secret-key"])
        return [d async for d in bridge.stream(ChatRequest(model="m", messages=HELLO))]

    got = asyncio.run(deltas())
    assert got[0].usage == Usage(input_tokens=472, cache_read_tokens=9) and got[0].text == ""
    assert [d.text for d in got[1:-1]] == ["Hi"] and got[-1].completion is not None


KEY = "sk-ant-q7Zr4f9a2cX1w8Lm"


class _Thinking:
    """A bridge streaming a thinking block whose text carries a key split across deltas."""

    provider = "anthropic"
    last_usage = None

    async def generate(self, request: ChatRequest) -> Completion:
        raise AssertionError("not called")

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        start = {"type": "thinking", "thinking": "", "signature": ""}
        yield Delta(event={"type": "content_block_start", "index": 0, "content_block": start})
        for piece in ("The key is " + KEY[:9], KEY[9:] + " and then", " more."):
            delta = {"type": "thinking_delta", "thinking": piece}
            yield Delta(event={"type": "content_block_delta", "index": 0, "delta": delta})
        signature = {"type": "signature_delta", "signature": "EqQBCgIYAh"}
        yield Delta(event={"type": "content_block_delta", "index": 0, "delta": signature})
        yield Delta(event={"type": "content_block_stop", "index": 0})
        yield Delta(text="Done.")
        yield Delta(completion=Completion(text="Done.", model="m", provider="anthropic"))

    async def aclose(self) -> None:
        return None


def test_a_thinking_block_passes_the_scrubber_with_a_split_key_held_back() -> None:
    async def deltas() -> list[Delta]:
        bridge = RedactingBridge(_Thinking(), [KEY])
        return [d async for d in bridge.stream(ChatRequest(model="m", messages=HELLO))]

    events = [d.event for d in asyncio.run(deltas()) if d.event is not None]
    thought = "".join(
        e["delta"].get("thinking", "") for e in events if e["type"] == "content_block_delta"
    )
    assert thought == "The key is *** and then more."
    assert not any(KEY[i : i + 6] in json.dumps(events) for i in range(len(KEY) - 5))
    assert events[0]["type"] == "content_block_start" and events[-1]["type"] == "content_block_stop"
    assert {"type": "signature_delta", "signature": "EqQBCgIYAh"} in [
        e.get("delta") for e in events
    ]


def test_an_upstream_refusal_is_kept_in_its_own_words_scrubbed_and_cut() -> None:
    body = {
        "error": {
            "message": "max_tokens is too large; your key " + KEY + " " + "x" * 900,
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "invalid_value",
        }
    }
    err = upstream_error("openai", 400, {}, body, [KEY])
    assert err.code == "upstream_bad_request" and err.reported is not None
    assert err.reported["type"] == "invalid_request_error" and err.reported["param"] == "max_tokens"
    assert KEY not in str(err.reported) and len(err.reported["message"] or "") <= 503
    relayed = provider_body("/v1/chat/completions", 400, "openai", err.reported)
    assert relayed is not None and relayed["error"]["code"] == "invalid_value"
    assert provider_body("/v1/messages", 400, "openai", err.reported) is None  # other protocol
    again = pickle.loads(pickle.dumps(err))
    assert again.reported == err.reported and again.status == 400
