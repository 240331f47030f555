"""A ``protocol = "vertex"`` upstream behind the gateway, end to end: the official ``openai``
and ``anthropic`` clients ask the runtime (its ``--upstreams`` file), which answers through
``VertexBridge`` on the ``google-genai`` SDK from the loopback Gemini server of
:mod:`tests.vertex_upstream`: JSON and streams, tool-call round trips, the cache, usage and
cost in ``/metrics``, upstream faults as clean statuses, and the key never in a response.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, ServerProcess, bearer, gateway_config, write_tokens
from tests.upstreams import count_tokens, default_reply
from tests.vertex_upstream import SIGNATURE, GeminiUpstream

KEY = "AIza-gateway-vertex-secret-77d3"
MODEL = "gemini/gemini-2.5-flash"
WEATHER_OPENAI = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
WEATHER_ANTHROPIC = {
    "name": "weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiUpstream]:
    with GeminiUpstream(KEY) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, gemini: GeminiUpstream
) -> Iterator[ServerThread]:
    config = gateway_config(
        tmp_path_factory.mktemp("gateway-vertex"),
        {
            "cache": {"embedder": "terms", "max_error": "off"},
            "upstreams": {
                "gemini": {
                    "protocol": "vertex",
                    "base_url": gemini.url,
                    "api_key": KEY,
                    "max_retries": 0,
                }
            },
        },
    )
    with ServerThread(config) as running:
        yield running


def gpt(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN_A, max_retries=0)


def claude(server: ServerThread) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=TOKEN_A, max_retries=0)


def test_an_openai_client_gets_gemini_answers_and_cache_hits(
    gateway: ServerThread, gemini: GeminiUpstream
) -> None:
    text = "How do I reverse a list in Python?"
    raw = gpt(gateway).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
        temperature=0,
        max_tokens=64,
    )
    assert raw.headers["x-evermind-cache"] == "miss"
    answer = raw.parse()
    assert answer.choices[0].message.content == default_reply(text)
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens == count_tokens(
        default_reply(text)
    )
    sent = gemini.last
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert sent.body["generationConfig"] == {"maxOutputTokens": 64, "temperature": 0.0}
    again = gpt(gateway).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
        temperature=0,
        max_tokens=64,
    )
    assert again.headers["x-evermind-cache"] == "hit-l1"
    assert again.parse().choices[0].message.content == default_reply(text)


def test_an_openai_stream_through_the_gateway(gateway: ServerThread) -> None:
    text = "Name three prime numbers for a streaming test"
    chunks = list(
        gpt(gateway).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": text}],
            stream=True,
            stream_options={"include_usage": True},
            temperature=0.7,
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == default_reply(text)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens == count_tokens(text)


def test_an_openai_tool_call_round_trip(gateway: ServerThread, gemini: GeminiUpstream) -> None:
    question = "Use weather for Paris today"
    first = gpt(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], tools=[WEATHER_OPENAI]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "weather"
    assert json.loads(call.function.arguments) == {"query": question}
    turns: list[Any] = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    final = gpt(gateway).chat.completions.create(
        model=MODEL, messages=turns, tools=[WEATHER_OPENAI]
    )
    assert final.choices[0].message.content == "Tool said: sunny, 21 C"
    contents = gemini.last.body["contents"]
    assert contents[1]["parts"][0]["thoughtSignature"] == SIGNATURE  # back through the id
    assert contents[2]["parts"][0]["functionResponse"]["name"] == "weather"


def test_an_anthropic_client_gets_gemini_answers_json_and_streamed(
    gateway: ServerThread, gemini: GeminiUpstream
) -> None:
    text = "What is a Python decorator?"
    message = claude(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        system="You answer briefly.",
        messages=[{"role": "user", "content": text}],
    )
    assert message.content[0].type == "text" and message.content[0].text == default_reply(text)
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == count_tokens(default_reply(text))
    assert gemini.last.body["systemInstruction"] == {"parts": [{"text": "You answer briefly."}]}
    streamed_text = "Explain generators for a streamed Messages test"
    with claude(gateway).messages.stream(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": streamed_text}],
        extra_body={"temperature": 0.9},
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == default_reply(streamed_text) and len(pieces) > 1
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    assert gemini.last.path.endswith(":streamGenerateContent")


def test_an_anthropic_tool_use_round_trip(gateway: ServerThread, gemini: GeminiUpstream) -> None:
    question = "Ask weather about Lyon"
    first = claude(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_ANTHROPIC],  # type: ignore[list-item]
        messages=[{"role": "user", "content": question}],
    )
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "weather" and use.input == {"query": question}
    final = claude(gateway).messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_ANTHROPIC],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": question},
            {"role": "assistant", "content": [use.model_dump()]},  # type: ignore[list-item]
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "rain"}],
            },
        ],
    )
    assert final.content[0].type == "text" and final.content[0].text == "Tool said: rain"
    response = gemini.last.body["contents"][2]["parts"][0]["functionResponse"]
    assert response == {"name": "weather", "response": {"output": "rain"}}


@pytest.mark.parametrize(
    ("fault", "status"), [("rate_limit", 429), ("server_error", 502), ("auth", 502)]
)
def test_upstream_faults_become_clean_statuses_without_the_key(
    gateway: ServerThread, gemini: GeminiUpstream, fault: str, status: int
) -> None:
    gemini.fail(fault, retry_after=3)
    with httpx.Client(base_url=gateway.url, headers=bearer(TOKEN_A), timeout=30) as http:
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"fault {fault}?"}]}
        answer = http.post("/v1/chat/completions", json={**body, "temperature": 0.5})
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"].startswith("upstream_")
    if fault == "rate_limit":
        assert answer.headers["retry-after"] == "3"
    assert KEY not in answer.text and KEY not in json.dumps(dict(answer.headers))


def test_metrics_count_gemini_tokens_and_cost(gateway: ServerThread) -> None:
    text = "What does the gateway count for Gemini?"
    gpt(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], temperature=0
    )
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        metrics = http.get("/metrics").text
    alpha = "t-" + hashlib.sha256(b"alpha").hexdigest()[:12]
    label = f'tenant="{alpha}",upstream="gemini"'

    def value(line_start: str) -> float:
        line = next(x for x in metrics.splitlines() if x.startswith(line_start))
        return float(line.rsplit(" ", 1)[1])

    assert value(f'evermind_gateway_tokens_total{{{label},kind="output"}}') > 0
    assert value(f"evermind_gateway_cost_usd_total{{{label}}}") > 0  # gemini-2.5-flash is priced
    assert KEY not in metrics


def test_a_streamed_tool_call_reaches_both_clients(gateway: ServerThread) -> None:
    question = "Stream a weather call for Oslo"
    chunks = list(
        gpt(gateway).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": question}],
            tools=[WEATHER_OPENAI],
            stream=True,
        )
    )
    pieces = [
        call
        for chunk in chunks
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or ()
    ]
    assert pieces and pieces[0].function is not None and pieces[0].function.name == "weather"
    arguments = "".join(p.function.arguments or "" for p in pieces if p.function is not None)
    assert json.loads(arguments) == {"query": question}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    with claude(gateway).messages.stream(
        model=MODEL,
        max_tokens=100,
        tools=[WEATHER_ANTHROPIC],  # type: ignore[list-item]
        messages=[{"role": "user", "content": question}],
    ) as stream:
        final = stream.get_final_message()
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert use.name == "weather" and use.input == {"query": question}
    assert final.stop_reason == "tool_use"


def test_evermind_serve_reads_a_vertex_upstream_from_a_toml_file(
    tmp_path: Path, gemini: GeminiUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI itself: ``evermind serve --upstreams upstreams.toml`` in a subprocess, the key
    read from ``GEMINI_API_KEY``, answering both clients."""
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    upstreams = tmp_path / "upstreams.toml"
    upstreams.write_text(
        "[cache]\n"
        'embedder = "none"\n'
        "[upstreams.gemini]\n"
        'protocol = "vertex"\n'
        f'base_url = "{gemini.url}"\n'
        'api_key = "env:GEMINI_API_KEY"\n'
        "max_retries = 0\n"
        "[default_upstreams]\n"
        'anthropic = "gemini"\n'
        'openai = "gemini"\n'
    )
    server = ServerProcess(
        tmp_path / "data",
        write_tokens(tmp_path / "tokens.txt"),
        tmp_path / "serve.log",
        args=("--upstreams", str(upstreams)),
    ).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN_A, max_retries=0)
        text = "Which protocol answers this?"
        answer = client.chat.completions.create(
            model="gemini-2.5-flash",  # a bare id: the openai route's default upstream
            messages=[{"role": "user", "content": text}],
        )
        assert answer.choices[0].message.content == default_reply(text)
        message = anthropic.Anthropic(
            base_url=server.url, api_key=TOKEN_A, max_retries=0
        ).messages.create(
            model="gemini-2.5-flash", max_tokens=50, messages=[{"role": "user", "content": text}]
        )
        assert message.content[0].type == "text" and message.content[0].text == default_reply(text)
        assert gemini.last.headers["x-goog-api-key"] == KEY
    finally:
        server.stop()
    assert KEY not in (tmp_path / "serve.log").read_text()
