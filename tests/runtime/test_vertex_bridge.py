"""VertexBridge and VertexEmbedder on the official ``google-genai`` SDK against a loopback
server speaking Gemini's documented REST format (:mod:`tests.vertex_upstream`), and the
``vertex`` protocol's pure functions (what the tab's FetchBridge sends) over plain HTTP."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from evermind.bridges import InstrumentedBridge, PriceTable, protocols
from evermind.bridges.base import ChatRequest, Completion, Delta, Message
from evermind.bridges.gemini_wire import call_parts
from evermind.bridges.streams import SSEParser
from evermind.bridges.vertex import VertexBridge, VertexEmbedder
from evermind.errors import ConfigError, InputError, UpstreamError
from evermind.memory.embedder import as_embedder
from tests.upstreams import count_tokens, default_reply
from tests.vertex_upstream import SIGNATURE, GeminiUpstream, embedding_of

T = TypeVar("T")
MODEL = "gemini-2.5-flash"
SYSTEM = "You are a careful assistant who answers in one short sentence."
FACTS = "The user's name is Ada. Ada lives in Lyon."
SAFETY = {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}
WEATHER = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiUpstream]:
    with GeminiUpstream() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def fresh(gemini: GeminiUpstream) -> None:
    gemini.reset()


def call(gemini: GeminiUpstream, use: Callable[[VertexBridge], Awaitable[T]], **options: Any) -> T:
    """Runs ``use`` with a fresh bridge on a fresh event loop."""

    async def main() -> T:
        bridge = VertexBridge(
            api_key=options.pop("api_key", gemini.api_key),
            base_url=options.pop("base_url", gemini.url),
            max_retries=options.pop("max_retries", 0),
            **options,
        )
        try:
            return await use(bridge)
        finally:
            await bridge.aclose()

    return asyncio.run(main())


def ask(text: str, **fields: Any) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=(Message("user", text),), **fields)


async def _deltas(bridge: VertexBridge, request: ChatRequest) -> list[Delta]:
    return [delta async for delta in bridge.stream(request)]


def test_generate_sends_gemini_rest_and_reads_text_usage_and_price(gemini: GeminiUpstream) -> None:
    request = ask("Where does Ada live?", system=SYSTEM, facts=FACTS, temperature=0.2)
    bridge_prices = PriceTable.load()

    async def twice(bridge: VertexBridge) -> tuple[Completion, Completion]:
        priced = InstrumentedBridge(bridge, bridge_prices)
        return await priced.generate(request), await priced.generate(request)

    first, second = call(gemini, twice)
    sent = gemini.requests[0]
    assert sent.path == f"/v1beta/models/{MODEL}:generateContent"
    assert sent.headers["x-goog-api-key"] == gemini.api_key
    assert sent.body["systemInstruction"] == {"parts": [{"text": SYSTEM}, {"text": FACTS}]}
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "Where does Ada live?"}]}]
    assert sent.body["generationConfig"] == {"maxOutputTokens": 512, "temperature": 0.2}
    assert first.text == default_reply("Where does Ada live?")
    assert (first.provider, first.model, first.finish_reason) == ("vertex", MODEL, "stop")
    assert first.id.startswith("loopback-") and first.raw is not None
    prompt = count_tokens(SYSTEM) + count_tokens(FACTS) + count_tokens("Where does Ada live?")
    assert first.usage.input_tokens == prompt and first.usage.cache_read_tokens == 0
    assert first.usage.output_tokens == count_tokens(first.text)
    # The same prompt again: Gemini's implicit cache reports it as cachedContentTokenCount,
    # inside promptTokenCount; the bridge splits it off and prices it at the cached rate.
    assert second.usage.cache_read_tokens == prompt and second.usage.input_tokens == 0
    rates = bridge_prices.rates(MODEL)
    assert rates is not None and rates.cache_read < rates.input
    assert first.cost_usd == pytest.approx(
        (prompt * rates.input + first.usage.output_tokens * rates.output) / 1e6
    )
    assert second.cost_usd == pytest.approx(
        (prompt * rates.cache_read + second.usage.output_tokens * rates.output) / 1e6
    )


def test_multi_turn_turns_become_user_and_model_contents(gemini: GeminiUpstream) -> None:
    request = ChatRequest(
        model=MODEL,
        messages=(
            Message("user", "Hello"),
            Message("assistant", "Hi, how can I help?"),
            Message("user", "Tell me a fact"),
        ),
        max_tokens=3,
        stop=("\n\n",),
        extra={"top_p": 0.5, "safetySettings": [SAFETY]},  # Gemini's own fields pass through
    )
    completion = call(gemini, lambda b: b.generate(request))
    assert [c["role"] for c in gemini.last.body["contents"]] == ["user", "model", "user"]
    config = gemini.last.body["generationConfig"]
    assert (config["stopSequences"], config["topP"]) == (["\n\n"], 0.5)
    assert gemini.last.body["safetySettings"] == [SAFETY]
    # Cut to maxOutputTokens words: MAX_TOKENS is the contract's "length".
    assert completion.finish_reason == "length" and count_tokens(completion.text) == 3


def test_stream_folds_every_chunk(gemini: GeminiUpstream) -> None:
    text = "Stream this sentence please"
    deltas = call(gemini, lambda b: _deltas(b, ask(text)))
    assert gemini.last.path == f"/v1beta/models/{MODEL}:streamGenerateContent"
    pieces = [d.text for d in deltas if d.completion is None]
    assert len(pieces) == count_tokens(default_reply(text))  # one chunk a word, none lost
    assert all(d.chunk is not None for d in deltas[:-1])
    completion = deltas[-1].completion
    assert completion is not None and sum(d.completion is not None for d in deltas) == 1
    assert "".join(pieces) == completion.text == default_reply(text)
    assert completion.usage.output_tokens == count_tokens(completion.text)
    assert completion.usage.input_tokens == count_tokens(text)


@pytest.mark.parametrize("fault", ["truncate", "cut", "stream_error"])
def test_a_broken_stream_is_an_upstream_error(gemini: GeminiUpstream, fault: str) -> None:
    gemini.fail(fault)
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: _deltas(b, ask("a long enough question to stream")))
    expected = {
        "truncate": "upstream_stream_cut",
        "cut": "upstream_stream_cut",
        "stream_error": "upstream_unavailable",
    }[fault]
    assert caught.value.code == expected, caught.value
    if fault == "stream_error":
        assert caught.value.status == 503 and "overloaded" in str(caught.value)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_call_round_trip(gemini: GeminiUpstream, streamed: bool) -> None:
    question = "What is the weather in Paris? Ask the weather tool."

    async def turn(bridge: VertexBridge, request: ChatRequest) -> Completion:
        if not streamed:
            return await bridge.generate(request)
        completion = (await _deltas(bridge, request))[-1].completion
        assert completion is not None
        return completion

    async def both(bridge: VertexBridge) -> tuple[Completion, Completion]:
        first = await turn(bridge, ask(question, tools=(WEATHER,)))
        (tool_call,) = first.tool_calls
        follow = ChatRequest(
            model=MODEL,
            messages=(
                Message("user", question),
                Message("assistant", first.text, tool_calls=first.tool_calls),
                Message("tool", "Sunny, 24 C", tool_call_id=tool_call.id),
            ),
            tools=(WEATHER,),
        )
        return first, await turn(bridge, follow)

    first, final = call(gemini, both)
    declared = gemini.requests[0].body["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "weather" and declared["description"] == WEATHER["description"]
    schema = declared.get("parametersJsonSchema") or declared.get("parameters_json_schema")
    assert schema == WEATHER["input_schema"]
    assert first.finish_reason == "tool_calls" and first.text == ""
    (tool_call,) = first.tool_calls
    assert tool_call.name == "weather" and tool_call.arguments == {"query": question}
    assert call_parts(tool_call.id) == ("", SIGNATURE)  # the signature rides in the id
    # The call went back signed, the result as a functionResponse named after the function.
    contents = gemini.last.body["contents"]
    assert contents[1]["role"] == "model"
    assert contents[1]["parts"][0]["thoughtSignature"] == SIGNATURE
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "weather", "response": {"output": "Sunny, 24 C"}}}
    ]
    assert final.text == "Tool said: Sunny, 24 C" and final.finish_reason == "stop"


def test_a_tool_result_without_its_call_is_refused_before_sending(gemini: GeminiUpstream) -> None:
    request = ChatRequest(
        model=MODEL,
        messages=(Message("user", "hi"), Message("tool", "42", tool_call_id="call_unknown")),
    )
    with pytest.raises(InputError, match="call_unknown"):
        call(gemini, lambda b: b.generate(request))
    with pytest.raises(InputError, match="not Gemini's"):
        call(gemini, lambda b: b.generate(ask("hi", extra={"no_such_field": 1})))
    assert gemini.requests == []


@pytest.mark.parametrize(
    ("fault", "retry_after", "code", "status", "wait"),
    [
        ("rate_limit", None, "upstream_rate_limited", 429, 7.0),  # Google's RetryInfo
        ("rate_limit", 0.25, "upstream_rate_limited", 429, 0.25),  # the header wins
        ("server_error", None, "upstream_unavailable", 500, None),
        ("overloaded", None, "upstream_unavailable", 503, None),
        ("auth", None, "upstream_auth", 401, None),
    ],
)
def test_http_errors_are_mapped(
    gemini: GeminiUpstream,
    fault: str,
    retry_after: float | None,
    code: str,
    status: int,
    wait: float | None,
) -> None:
    gemini.fail(fault, retry_after=retry_after)
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: b.generate(ask("hello")))
    err = caught.value
    assert (err.code, err.status, err.retry_after, err.provider) == (code, status, wait, "vertex")


def test_a_wrong_key_is_an_auth_error_and_no_key_reaches_a_message(
    gemini: GeminiUpstream,
) -> None:
    # The Gemini API answers a bad key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: b.generate(ask("hello")), api_key="AIza-wrong-key-123")
    assert caught.value.code == "upstream_auth" and caught.value.status == 400
    assert "API_KEY_INVALID" not in str(caught.value) or "check the API key" in str(caught.value)
    assert "AIza-wrong-key-123" not in str(caught.value)
    # An upstream that echoes the key in its error: scrubbed before it is quoted.
    echo = {"error": {"code": 400, "message": f"bad key {gemini.api_key}", "status": "X"}}
    gemini.script(400, echo)
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: b.generate(ask("hello")))
    assert gemini.api_key not in str(caught.value) and "***" in str(caught.value)
    assert caught.value.code == "upstream_bad_request"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"<html>not json</html>", "upstream_malformed"),
        ({"candidates": []}, "upstream_malformed"),
        (
            {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "index": 0}]},
            "upstream_malformed",
        ),
        (
            {
                "candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": -3},
            },
            "upstream_malformed",
        ),
        ({"promptFeedback": {"blockReason": "SAFETY"}}, "upstream_bad_request"),
        ({"candidates": [{"finishReason": "SAFETY", "index": 0}]}, "upstream_bad_request"),
    ],
)
def test_malformed_or_blocked_answers_never_become_completions(
    gemini: GeminiUpstream, body: Any, code: str
) -> None:
    gemini.script(200, body)
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: b.generate(ask("hello")))
    assert caught.value.code == code, caught.value


def test_vertex_ai_modes_use_their_paths(gemini: GeminiUpstream) -> None:
    # Express mode: an API key on Vertex AI.
    express = call(gemini, lambda b: b.generate(ask("hello")), vertexai=True)
    assert gemini.last.path == f"/v1beta1/publishers/google/models/{MODEL}:generateContent"
    assert express.text == default_reply("hello")
    # A project and location with OAuth credentials (a bearer token; no key).
    from google.oauth2.credentials import Credentials

    project = call(
        gemini,
        lambda b: b.generate(ask("hello")),
        api_key=None,
        vertexai=True,
        project="demo-project",
        location="europe-west4",
        credentials=Credentials(token=gemini.token),
    )
    assert gemini.last.path == (
        "/v1beta1/projects/demo-project/locations/europe-west4/publishers/google/models/"
        f"{MODEL}:generateContent"
    )
    assert gemini.last.headers["authorization"] == f"Bearer {gemini.token}"
    assert project.text == express.text
    # Credentials that cannot refresh (expired, no refresh token): an auth error, not a crash.
    expired = Credentials(token="old", expiry=datetime.datetime(2000, 1, 1))
    with pytest.raises(UpstreamError) as caught:
        call(
            gemini,
            lambda b: b.generate(ask("hello")),
            api_key=None,
            vertexai=True,
            project="demo-project",
            location="europe-west4",
            credentials=expired,
        )
    assert caught.value.code == "upstream_auth"


def test_a_base_url_with_a_version_sets_it_and_a_bad_one_is_refused(
    gemini: GeminiUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(gemini, lambda b: b.generate(ask("hello")), base_url=gemini.url + "/v1")
    assert gemini.last.path == f"/v1/models/{MODEL}:generateContent"
    for bad in ("ftp://example.com", "http://[::1", "http://"):
        with pytest.raises(ConfigError, match="base_url must be an http"):
            VertexBridge(api_key="k", base_url=bad)
    for variable in ("GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ConfigError, match="vertex: "):
        VertexBridge(api_key=None, vertexai=False)  # no key anywhere


def test_the_embedder_batches_and_fits_the_memory(gemini: GeminiUpstream) -> None:
    texts = [f"text number {i}" for i in range(5)]

    async def main() -> tuple[list[list[float]], list[list[float]], VertexEmbedder]:
        embedder = VertexEmbedder(
            api_key=gemini.api_key, base_url=gemini.url, max_retries=0, batch_size=2
        )
        small = VertexEmbedder(
            api_key=gemini.api_key, base_url=gemini.url, max_retries=0, output_dimensionality=4
        )
        try:
            bound = as_embedder(embedder)
            assert bound.fingerprint == "vertex:gemini-embedding-001"
            return await embedder.embed(texts), await small.embed(texts[:1]), embedder
        finally:
            await embedder.aclose()
            await small.aclose()

    vectors, small, embedder = asyncio.run(main())
    assert embedder.calls == 3  # 5 texts, 2 a call
    batches = [r for r in gemini.requests if r.path.endswith(":batchEmbedContents")]
    assert [len(r.body["requests"]) for r in batches] == [2, 2, 1, 1]
    assert batches[0].path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    for got, text in zip(vectors, texts, strict=True):
        assert got == pytest.approx(embedding_of(text))
    assert batches[-1].body["requests"][0]["outputDimensionality"] == 4
    assert len(small) == 1 and small[0] == pytest.approx(embedding_of(texts[0], 4))


def test_embedder_errors_are_mapped(gemini: GeminiUpstream) -> None:
    async def embed(**options: Any) -> list[list[float]]:
        embedder = VertexEmbedder(base_url=gemini.url, max_retries=0, **options)
        try:
            return await embedder.embed(["a", "b"])
        finally:
            await embedder.aclose()

    gemini.fail("rate_limit", retry_after=None)
    with pytest.raises(UpstreamError) as caught:
        asyncio.run(embed(api_key=gemini.api_key))
    assert caught.value.code == "upstream_rate_limited" and caught.value.retry_after == 7.0
    gemini.script(200, {"embeddings": [{"values": [0.1, 0.2]}]})  # one vector for two texts
    with pytest.raises(UpstreamError, match="2 texts were sent but 1"):
        asyncio.run(embed(api_key=gemini.api_key))


def test_the_vertex_protocol_speaks_gemini_over_plain_http(gemini: GeminiUpstream) -> None:
    """What the tab's FetchBridge does with the registry's ``vertex`` entry: path, headers,
    body, and the parsers, over HTTP without the SDK."""
    wire = protocols.lookup("vertex", "test")
    request = ask("Plain HTTP please", system=SYSTEM)
    headers = {"content-type": "application/json", **wire.headers(gemini.api_key)}
    with httpx.Client(base_url=gemini.url, headers=headers, timeout=30) as client:
        answer = client.post(wire.request_path(MODEL, False), json=wire.body(request, False))
        completion = wire.completion(answer.json(), "vertex")
        assert completion.text == default_reply("Plain HTTP please")
        fold, parser = wire.stream("vertex"), SSEParser("vertex")
        with client.stream(
            "POST", wire.request_path(MODEL, True), json=wire.body(request, True)
        ) as streamed:
            texts = [
                wire.read_event(fold, event.data)
                for piece in streamed.iter_text()
                for event in parser.feed(piece)
            ]
        refused = client.post(
            wire.request_path(MODEL, False),
            json=wire.body(request, False),
            headers={"x-goog-api-key": "AIza-not-the-key"},
        )
        err = wire.http_error("vertex", refused.status_code, refused.headers, refused.json())
        assert (refused.status_code, err.code) == (400, "upstream_auth")
    assert fold.done and "".join(texts) == fold.completion().text == completion.text
    assert gemini.requests[1].path == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert gemini.requests[1].body["systemInstruction"]["parts"][0]["text"] == SYSTEM


def _event(data: Any) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\r\n\r\n"


PIECE = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Half"}]}, "index": 0}]}


@pytest.mark.parametrize(
    ("events", "code"),
    [
        ([_event(PIECE), _event("{not json")], "upstream_malformed"),
        # google-genai's converter drops a candidates that is no list: no finishReason came.
        ([_event(PIECE), _event({"candidates": "no list"})], "upstream_stream_cut"),
        ([_event({"candidates": [{"index": "zero"}]})], "upstream_malformed"),
        ([_event(PIECE)], "upstream_stream_cut"),  # ends cleanly, no finishReason
        ([], "upstream_stream_cut"),
        (
            [_event(PIECE), _event({"error": {"code": 429, "message": "slow", "status": "X"}})],
            "upstream_rate_limited",
        ),
        (
            [_event({"error": {"message": "no code", "status": "INTERNAL", "details": 5}})],
            "upstream_malformed",  # the SDK itself fails on an error without a code
        ),
    ],
)
def test_hostile_streams_never_become_completions(
    gemini: GeminiUpstream, events: list[str], code: str
) -> None:
    gemini.script(200, events=events)
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: _deltas(b, ask("hello")))
    assert caught.value.code == code, caught.value


def test_an_error_object_in_a_200_answer_is_mapped(gemini: GeminiUpstream) -> None:
    gemini.script(200, {"error": {"message": "quota", "status": "RESOURCE_EXHAUSTED"}})
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: b.generate(ask("hello")))
    assert caught.value.code == "upstream_rate_limited" and "quota" in str(caught.value)
    assert "HTTP None" not in str(caught.value)


def test_an_answer_past_max_answer_chars_is_refused(gemini: GeminiUpstream) -> None:
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: b.generate(ask("a question")), max_answer_chars=5)
    assert caught.value.code == "upstream_too_large"
    with pytest.raises(UpstreamError) as caught:
        call(gemini, lambda b: _deltas(b, ask("a question")), max_answer_chars=5)
    assert caught.value.code == "upstream_too_large"


def test_the_sdk_retries_a_5xx_when_asked(gemini: GeminiUpstream) -> None:
    gemini.fail("server_error")
    completion = call(gemini, lambda b: b.generate(ask("retry me")), max_retries=1)
    assert completion.text == default_reply("retry me") and len(gemini.requests) == 2


def test_an_unreachable_upstream_is_unavailable_not_a_cut_stream() -> None:
    from evermind.runtime.server import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def both() -> list[str]:
        bridge = VertexBridge(api_key="k", base_url=url, max_retries=0, timeout=5)
        codes = []
        try:
            for streamed in (False, True):
                try:
                    if streamed:
                        await _deltas(bridge, ask("hello"))
                    else:
                        await bridge.generate(ask("hello"))
                except UpstreamError as err:
                    codes.append(err.code)
        finally:
            await bridge.aclose()
        return codes

    assert asyncio.run(both()) == ["upstream_unavailable", "upstream_unavailable"]
