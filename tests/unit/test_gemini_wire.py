"""The ``vertex`` protocol's pure functions (:mod:`evermind.bridges.gemini_wire`): request
bodies, tool-call ids, usage, finish reasons and Google's error bodies, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from evermind.bridges.base import ChatRequest, Message, ToolCall
from evermind.bridges.gemini_wire import (
    GeminiStream,
    call_id,
    call_parts,
    gemini_body,
    gemini_completion,
    gemini_error,
    gemini_path,
    gemini_usage,
)
from evermind.errors import InputError, UpstreamError


def _answer(parts: list[dict[str, Any]], finish: str = "STOP", **top: Any) -> dict[str, Any]:
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": finish}
    return {"candidates": [candidate], **top}


def test_call_ids_carry_the_call_id_and_signature_both_ways() -> None:
    assert call_id("fc-1", "") == "fc-1"  # a call with its own id and no signature keeps it
    signed = call_id("", "c2ln")
    assert signed.startswith("gemini_") and call_parts(signed) == ("", "c2ln")
    assert call_parts(call_id("fc-2", "c2ln")) == ("fc-2", "c2ln")
    assert call_id("", "") != call_id("", "")  # fresh ids never collide
    assert call_parts("call_abc") == ("call_abc", "")
    assert call_parts("gemini_%%%not-base64") == ("gemini_%%%not-base64", "")


def test_the_body_maps_turns_tools_and_generation_settings() -> None:
    calls = (ToolCall(call_id("", "sig"), "lookup", {"q": 1}), ToolCall("own-2", "time", {}))
    request = ChatRequest(
        model="gemini-2.5-pro",
        messages=(
            Message("user", "Look two things up"),
            Message("assistant", "On it.", tool_calls=calls),
            Message("tool", '{"found": true}', tool_call_id=calls[0].id),
            Message("tool", "noon", tool_call_id="own-2"),
        ),
        system="static",
        facts="per request",
        max_tokens=99,
        temperature=0.5,
        stop=("END",),
        tools=({"name": "lookup", "input_schema": {"type": "object"}}, {"name": "time"}),
        extra={"top_k": 3, "seed": 7, "generationConfig": {"candidateCount": 1}, "labels": {}},
    )
    body = gemini_body(request)
    assert body["systemInstruction"] == {"parts": [{"text": "static"}, {"text": "per request"}]}
    assert body["generationConfig"] == {
        "maxOutputTokens": 99,
        "temperature": 0.5,
        "stopSequences": ["END"],
        "topK": 3,
        "seed": 7,
        "candidateCount": 1,
    }
    assert body["labels"] == {}
    declared = body["tools"][0]["functionDeclarations"]
    assert declared[1] == {
        "name": "time",
        "parametersJsonSchema": {"type": "object", "properties": {}},
    }
    user, model, results = body["contents"]
    assert user == {"role": "user", "parts": [{"text": "Look two things up"}]}
    assert model["role"] == "model" and model["parts"][0] == {"text": "On it."}
    assert model["parts"][1] == {
        "functionCall": {"name": "lookup", "args": {"q": 1}},
        "thoughtSignature": "sig",
    }
    assert model["parts"][2] == {"functionCall": {"name": "time", "args": {}, "id": "own-2"}}
    # Both results answer in one user turn; a JSON object result goes as that object.
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "lookup", "response": {"found": True}}},
            {"functionResponse": {"name": "time", "response": {"output": "noon"}, "id": "own-2"}},
        ],
    }
    assert gemini_path("gemini-2.5-pro", True) == (
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    )
    assert gemini_path("tunedModels/x", False) == "/v1beta/tunedModels/x:generateContent"


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ((Message("user", "hi"), Message("tool", "x", tool_call_id="nobody")), "nobody"),
        ((Message("user", [{"type": "image_url", "image_url": {}}]),), "image_url"),
    ],
)
def test_requests_gemini_cannot_take_are_refused(messages: tuple[Message, ...], match: str) -> None:
    with pytest.raises(InputError, match=match):
        gemini_body(ChatRequest(model="m", messages=messages))


def test_usage_splits_the_cached_prompt_and_counts_thoughts_as_output() -> None:
    usage = gemini_usage(
        {
            "promptTokenCount": 100,
            "cachedContentTokenCount": 60,
            "candidatesTokenCount": 10,
            "thoughtsTokenCount": 5,
            "toolUsePromptTokenCount": 3,
            "totalTokenCount": 118,
        }
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (43, 60, 15)
    assert usage.cache_write_tokens == 0
    with pytest.raises(UpstreamError, match="promptTokenCount"):
        gemini_usage({"promptTokenCount": 1.5})


def test_completions_read_text_calls_finish_and_skip_thoughts() -> None:
    done = gemini_completion(
        _answer(
            [{"text": "thinking...", "thought": True}, {"text": "Hello"}, {"text": " world"}],
            modelVersion="gemini-2.5-flash",
            responseId="r1",
            usageMetadata={"promptTokenCount": 2, "candidatesTokenCount": 2},
        )
    )
    assert (done.text, done.model, done.id, done.finish_reason) == (
        "Hello world",
        "gemini-2.5-flash",
        "r1",
        "stop",
    )
    called = gemini_completion(
        _answer([{"functionCall": {"name": "f", "args": {"a": 1}, "id": "x"}}])
    )
    assert called.finish_reason == "tool_calls" and called.tool_calls == (
        ToolCall("x", "f", {"a": 1}),
    )
    assert gemini_completion(_answer([{"text": "cut"}], "MAX_TOKENS")).finish_reason == "length"
    assert gemini_completion(_answer([{"text": "odd"}], "LANGUAGE")).finish_reason == "stop"
    for bad in (
        {"candidates": [{"content": {"parts": [{"text": "no finish"}]}}]},
        _answer([{"functionCall": {"args": {}}}]),  # a call without a name
        _answer([{"text": 5}]),
    ):
        with pytest.raises(UpstreamError) as caught:
            gemini_completion(bad)
        assert caught.value.code == "upstream_malformed"


def test_the_stream_fold_is_done_only_at_a_finish_reason() -> None:
    fold = GeminiStream(max_chars=20)
    assert fold.feed({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]}) == "Hel"
    assert not fold.done
    fold.feed(_answer([{"text": "lo"}], usageMetadata={"promptTokenCount": 4}))
    assert fold.done and fold.completion().text == "Hello"
    assert fold.completion().usage.input_tokens == 4
    with pytest.raises(UpstreamError) as caught:
        GeminiStream(max_chars=3).feed(_answer([{"text": "too long"}]))
    assert caught.value.code == "upstream_too_large"


def test_google_errors_are_mapped() -> None:
    key_invalid = {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
            ],
        }
    }
    err = gemini_error("vertex", 400, {}, key_invalid)
    assert (err.code, err.status) == ("upstream_auth", 400) and "check the API key" in str(err)
    limited = {"error": {"code": 429, "message": "slow", "details": [{"retryDelay": "12.5s"}]}}
    assert gemini_error("vertex", 429, {}, limited).retry_after == 12.5
    assert gemini_error("vertex", 429, {"Retry-After": "2"}, limited).retry_after == 2.0
    echoed = gemini_error(
        "vertex", 403, {}, {"error": {"message": "key AIza-s3cret denied"}}, ["AIza-s3cret"]
    )
    assert "AIza-s3cret" not in str(echoed) and echoed.code == "upstream_auth"
    hostile = gemini_error("vertex", 500, {}, {"error": {"details": 5, "code": True}})
    assert hostile.code == "upstream_unavailable"
