"""No piece of an upstream key reaches a client or the cache (issue 35, item 8).

``evermind serve --upstreams`` on loopback, both upstream protocols scripted to echo their
key: in a 500's text body near character 480 (a cut to 500 characters after scrubbing left
20 of 46 key characters in the 502 message), in a 401's message, in a successful answer's
text and tool-call arguments, split across two streamed deltas, and in a mid-stream error.
A "leak" is any 6 consecutive characters of a key in a response (headers included); the
repeat of a scrubbed answer is served from the cache scrubbed too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, bearer, gateway_config
from tests.upstreams import AnthropicUpstream, OpenAIUpstream, Upstream

KEYS = {
    "openai": "QX7v9LmZp2Rk4Tw8Yb3Nc6Hd1Jf5Gs0Ae9Uy7Io3Pq2Wl6",  # 46 characters, as measured
    "anthropic": "Vb8Nm3Kx5Rt1Zq9Wp4Ly7Hc2Gd6Fs0Je3Ua8Oi5Tn1Mk4",
}
MODELS = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-sonnet-4-5"}
PROTOCOLS = ("openai", "anthropic")


def leaks(text: str, key: str, run: int = 6) -> list[str]:
    """Every ``run`` consecutive characters of ``key`` found in ``text``."""
    return sorted({key[i : i + run] for i in range(len(key) - run + 1) if key[i : i + run] in text})


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, Upstream]]:
    with OpenAIUpstream(KEYS["openai"]) as gpt, AnthropicUpstream(KEYS["anthropic"]) as claude:
        yield {"openai": gpt, "anthropic": claude}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstreams: dict[str, Upstream]
) -> Iterator[ServerThread]:
    config = gateway_config(
        tmp_path_factory.mktemp("secrets"),
        {
            "cache": {"embedder": "terms"},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstreams["openai"].url + "/v1",
                    "api_key": KEYS["openai"],
                    "max_retries": 0,
                },
                "anthropic": {
                    "protocol": "anthropic",
                    "base_url": upstreams["anthropic"].url,
                    "api_key": KEYS["anthropic"],
                    "max_retries": 0,
                },
            },
        },
    )
    with ServerThread(config) as running:
        yield running


def ask(server: ServerThread, protocol: str, question: str, stream: bool = False) -> httpx.Response:
    body: dict[str, Any] = {
        "model": MODELS[protocol],
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "stream": stream,
    }
    with httpx.Client(base_url=server.url, headers=bearer(TOKEN_A), timeout=30) as http:
        return http.post("/v1/chat/completions", json=body)


def seen(response: httpx.Response) -> str:
    return response.text + json.dumps(dict(response.headers))


def answer_with(protocol: str, text: str, tool_arguments: dict[str, Any] | None = None) -> Any:
    """A well-formed answer of ``protocol`` saying ``text`` (and calling a tool, if given)."""
    if protocol == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_arguments is not None:
            function = {"name": "lookup", "arguments": json.dumps(tool_arguments)}
            message["tool_calls"] = [{"id": "call_1", "type": "function", "function": function}]
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return {"id": "c", "model": "m", "choices": [choice], "usage": {"prompt_tokens": 3}}
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool_arguments is not None:
        content.append(
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": tool_arguments}
        )
    return {
        "id": "msg",
        "type": "message",
        "model": "m",
        "content": content,
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 5},
    }


def split_stream(protocol: str, pieces: list[str]) -> list[str]:
    """A well-formed stream of ``protocol`` whose text deltas are ``pieces``."""
    if protocol == "openai":

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return f"data: {json.dumps({'id': 'c', 'model': 'm', 'choices': [choice]})}\n\n"

        return [*(chunk({"content": p}) for p in pieces), chunk({}, "stop"), "data: [DONE]\n\n"]

    def event(kind: str, **data: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    return [
        event("message_start", message={"id": "msg", "model": "m", "usage": {"input_tokens": 3}}),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        *(
            event("content_block_delta", index=0, delta={"type": "text_delta", "text": p})
            for p in pieces
        ),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 5}),
        event("message_stop"),
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_key_near_the_cut_of_an_error_body_leaks_no_character(
    server: ServerThread, upstreams: dict[str, Upstream], protocol: str
) -> None:
    key = KEYS[protocol]
    for offset in (470, 480, 490, 499, 520):
        upstreams[protocol].script(500, "x" * offset + key + " was refused")
        answer = ask(server, protocol, f"Error with the key at {offset}?")
        assert answer.status_code == 502, answer.text
        assert leaks(seen(answer), key) == [], (offset, answer.text)
    message = {"error": {"message": "Incorrect API key provided: " + "y" * 460 + key}}
    upstreams[protocol].script(401, message)
    answer = ask(server, protocol, "Is my key right?")
    assert answer.status_code == 502 and leaks(seen(answer), key) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_key_echoed_in_a_successful_answer_is_scrubbed_before_caching_and_returning(
    server: ServerThread, upstreams: dict[str, Upstream], protocol: str
) -> None:
    key = KEYS[protocol]
    question = f"What key does the {protocol} upstream use?"
    upstreams[protocol].script(200, answer_with(protocol, f"Your key is {key}, keep it safe."))
    first = ask(server, protocol, question)
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"]["content"] == "Your key is ***, keep it safe."
    again = ask(server, protocol, question)  # served from the cache, as it was stored
    assert again.headers["x-evermind-cache"] == "hit-l1"
    assert again.json()["choices"][0]["message"]["content"] == "Your key is ***, keep it safe."
    streamed = ask(server, protocol, question, stream=True)  # a streamed hit, the same text
    for response in (first, again, streamed):
        assert leaks(seen(response), key) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_key_in_tool_arguments_is_scrubbed(
    server: ServerThread, upstreams: dict[str, Upstream], protocol: str
) -> None:
    key = KEYS[protocol]
    arguments = {"token": key, "nested": [{"again": f"prefix-{key}-suffix"}]}
    upstreams[protocol].script(200, answer_with(protocol, "Calling.", arguments))
    answer = ask(server, protocol, "Look my key up with the tool")
    assert answer.status_code == 200, answer.text
    call = answer.json()["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {
        "token": "***",
        "nested": [{"again": "prefix-***-suffix"}],
    }
    assert leaks(seen(answer), key) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_key_split_across_streamed_deltas_never_appears(
    server: ServerThread, upstreams: dict[str, Upstream], protocol: str
) -> None:
    key = KEYS[protocol]
    pieces = ["Here it is: ", key[:10], key[10:30], key[30:], " and more", " text."]
    upstreams[protocol].script(200, events=split_stream(protocol, pieces))
    answer = ask(server, protocol, "Stream my key, please", stream=True)
    assert answer.status_code == 200
    text = "".join(
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for line in answer.text.splitlines()
        if line.startswith("data: {")
    )
    assert text == "Here it is: *** and more text."
    assert leaks(seen(answer), key) == []
    # a prefix of the key that never completes is released at the end, unchanged
    upstreams[protocol].script(200, events=split_stream(protocol, ["Almost: ", key[:20]]))
    partial = ask(server, protocol, "Stream almost my key", stream=True)
    assert key[:20] in partial.text  # only a whole key is a secret; 20 characters are not one


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_key_in_a_mid_stream_error_is_scrubbed(
    server: ServerThread, upstreams: dict[str, Upstream], protocol: str
) -> None:
    key = KEYS[protocol]
    events = split_stream(protocol, ["Some", " text"])[:-3]  # cut before the end...
    if protocol == "openai":
        error = {"error": {"message": "z" * 490 + key, "type": "server_error"}}
        events.append(f"data: {json.dumps(error)}\n\n")
    else:
        error = {"type": "error", "error": {"type": "api_error", "message": "z" * 490 + key}}
        events.append(f"event: error\ndata: {json.dumps(error)}\n\n")
    upstreams[protocol].script(200, events=events)
    answer = ask(server, protocol, "Break with my key", stream=True)
    assert '"error"' in answer.text and leaks(seen(answer), key) == []


def test_an_openai_stream_relayed_chunk_for_chunk_leaks_no_piece_of_a_key(
    server: ServerThread, upstreams: dict[str, Upstream]
) -> None:
    """The upstream's own chunks go on one for one (their logprobs too); a key split across
    two chunks' content, or across two pieces of a tool call's arguments, is scrubbed: the
    held-back piece moves to the next chunk, and a chunk whose text was held back or replaced
    loses its logprobs (tokens are pieces of the text)."""
    key = KEYS["openai"]

    def chunk(delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return f"data: {json.dumps({'id': 'up-1', 'model': 'm', 'choices': [choice]})}\n\n"

    def lp(token: str) -> dict[str, Any]:
        return {"content": [{"token": token, "logprob": -0.5, "bytes": None, "top_logprobs": []}]}

    texts = ["Plain words. ", "Key: " + key[:12], key[12:] + ".", " Done."]
    call_args = ['{"token": "' + key[:20], key[20:] + '"}']
    events = [
        *(chunk({"content": t}, lp(t)) for t in texts),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "save", "arguments": call_args[0]},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": call_args[1]}}]}),
        chunk({}, None, "tool_calls"),
        "data: [DONE]\n\n",
    ]
    upstreams["openai"].script(200, events=events)
    answer = ask(server, "openai", "Relay my key chunk by chunk", stream=True)
    assert answer.status_code == 200 and leaks(seen(answer), key) == []
    chunks = [
        json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")
    ]
    assert len(chunks) == len(events) - 1  # one for one ([DONE] aside)
    assert all(c["id"] == "up-1" for c in chunks)  # the upstream's own, not rebuilt
    choices = [c["choices"][0] for c in chunks]
    content = [ch["delta"].get("content") for ch in choices[:4]]
    assert "".join(content) == "Plain words. Key: ***. Done."
    assert choices[0]["logprobs"] == lp(texts[0])  # nothing held: the upstream's logprobs
    assert choices[1]["logprobs"] is None and choices[2]["logprobs"] is None  # held/replaced
    arguments = "".join(
        ch["delta"]["tool_calls"][0]["function"]["arguments"] for ch in choices[4:6]
    )
    assert json.loads(arguments) == {"token": "***"}
    assert choices[-1]["finish_reason"] == "tool_calls" and "evermind" in chunks[-1]
