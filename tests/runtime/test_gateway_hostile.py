"""A hostile or broken upstream never breaks the gateway (issue 35, items 2 and 3).

``evermind serve --upstreams`` on loopback, in front of the loopback OpenAI and Anthropic
servers of :mod:`tests.upstreams`, each scripted to answer with one broken shape: HTTP 200
``{"choices": []}``, ``content: null``, an ``{"error": ...}`` body, a tool call without an
id, a 429 with ``Retry-After: inf``, ``{"choices": "x"}``, a streamed usage of ``"abc"``, a
stream that ends ``[DONE]`` without a ``finish_reason``, JSON nested 100,000 deep, ... Every
shape is sent through both client routes (``/v1/chat/completions`` and ``/v1/messages``) to
both upstream protocols, streamed and not. For each:

- the client gets a provider-shaped 4xx/5xx, never a 500 (or, on a stream whose headers are
  out, an error event, never a silent cut or a clean end);
- nothing is stored: the same question, asked again of a healthy upstream, is a ``miss``
  answered afresh;
- the server logs no traceback (and nothing at ERROR).

The counts (inputs tried, 5xx, tracebacks) are printed (``pytest -s``). A 5xx in the
provider's own error shape is no hostile input: its status, error object and Retry-After
reach the client (the last tests), where a 5xx in no such shape is the gateway's 502.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, bearer, gateway_config
from tests.upstreams import AnthropicUpstream, OpenAIUpstream, Upstream

OPENAI_KEY = "sk-hostile-openai-4b1d0c2e9f"
ANTHROPIC_KEY = "sk-ant-hostile-77e1a3c5d9"
MODELS = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-sonnet-4-5"}
DEEP = "[" * 100_000 + "]" * 100_000


# ------------------------------------------------------------------ the hostile shapes


def _chat(**fields: Any) -> dict[str, Any]:
    """A Chat Completions answer, with ``fields`` replacing parts of a valid one."""
    message = {"role": "assistant", "content": "fine"}
    message.update(fields.pop("message", {}))
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    choice.update(fields.pop("choice", {}))
    answer = {"id": "c1", "model": "m", "choices": [choice], "usage": {"prompt_tokens": 1}}
    answer.update(fields)
    return answer


def _messages(**fields: Any) -> dict[str, Any]:
    """A Messages answer, with ``fields`` replacing parts of a valid one."""
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "fine"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    answer.update(fields)
    return answer


NO_ID_CALL = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
#: (name, status, body) of a non-streamed OpenAI answer.
OPENAI_BODIES: list[tuple[str, int, Any]] = [
    ("choices empty", 200, _chat(choices=[])),
    ("choices a string", 200, _chat(choices="x")),
    ("choices missing", 200, {"id": "c1", "model": "m"}),
    ("content null", 200, _chat(message={"content": None})),
    ("content empty", 200, _chat(message={"content": ""})),
    ("content a number", 200, _chat(message={"content": 42})),
    ("content an object", 200, _chat(message={"content": {"a": 1}})),
    ("error body on 200", 200, {"error": {"message": "boom", "type": "server_error"}}),
    ("an array", 200, []),
    ("a string", 200, "a string"),
    ("null", 200, b"null"),
    ("not JSON", 200, b"<html>oops</html>"),
    ("empty body", 200, b""),
    ("JSON nested 100k deep", 200, DEEP.encode()),
    ("choice a string", 200, _chat(choices=["x"])),
    ("message a string", 200, _chat(choice={"message": "x"})),
    ("message missing", 200, _chat(choice={"message": None})),
    ("tool_calls a string", 200, _chat(message={"content": None, "tool_calls": "x"})),
    ("tool call without id", 200, _chat(message={"content": None, "tool_calls": [NO_ID_CALL]})),
    ("tool call id a number", 200, _chat(message={"tool_calls": [{**NO_ID_CALL, "id": 5}]})),
    (
        "tool call function a string",
        200,
        _chat(message={"tool_calls": [{"id": "t", "function": "x"}]}),
    ),
    ("usage a string", 200, _chat(usage="abc")),
    ("usage negative", 200, _chat(usage={"prompt_tokens": -5})),
    ("usage 10^30", 200, _chat(usage={"prompt_tokens": 10**30})),
    ("usage 1e30", 200, _chat(usage={"completion_tokens": 1e30})),
    ("usage a numeric string", 200, _chat(usage={"prompt_tokens": "12"})),
    ("usage NaN", 200, json.dumps(_chat()).replace('"prompt_tokens": 1', '"prompt_tokens": NaN')),
    (
        "usage Infinity",
        200,
        json.dumps(_chat()).replace('"prompt_tokens": 1', '"prompt_tokens": 1e999'),
    ),
    ("usage details a string", 200, _chat(usage={"prompt_tokens_details": "x"})),
    ("finish_reason missing", 200, _chat(choice={"finish_reason": None})),
    ("finish_reason a number", 200, _chat(choice={"finish_reason": 7})),
    ("model an array", 200, _chat(model=[1])),
    ("id an object", 200, _chat(id={"a": 1})),
]
#: (name, status, body) of a non-streamed Messages answer.
ANTHROPIC_BODIES: list[tuple[str, int, Any]] = [
    ("error object on 200", 200, {"type": "error", "error": {"type": "api_error", "message": "x"}}),
    ("content null", 200, _messages(content=None)),
    ("content a string", 200, _messages(content="x")),
    ("content empty", 200, _messages(content=[])),
    ("content blank text", 200, _messages(content=[{"type": "text", "text": "  "}])),
    ("block a number", 200, _messages(content=[5])),
    ("text a number", 200, _messages(content=[{"type": "text", "text": 5}])),
    (
        "tool_use without id",
        200,
        _messages(content=[{"type": "tool_use", "name": "f", "input": {}}]),
    ),
    (
        "tool_use without name",
        200,
        _messages(content=[{"type": "tool_use", "id": "t", "input": {}}]),
    ),
    (
        "tool_use input a string",
        200,
        _messages(content=[{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]),
    ),
    ("usage a string", 200, _messages(usage="abc")),
    ("usage negative", 200, _messages(usage={"input_tokens": -5})),
    ("usage 10^30", 200, _messages(usage={"output_tokens": 10**30})),
    ("stop_reason missing", 200, _messages(stop_reason=None)),
    ("stop_reason an object", 200, _messages(stop_reason={"a": 1})),
    ("an array", 200, []),
    ("not JSON", 200, b"<html>oops</html>"),
    ("empty body", 200, b""),
    ("JSON nested 100k deep", 200, DEEP.encode()),
]
#: (name, status, headers, body) of HTTP failures, for both protocols and both call kinds.
STATUSES: list[tuple[str, int, dict[str, str], Any]] = [
    ("429 retry-after inf", 429, {"retry-after": "inf"}, {"error": {"message": "slow"}}),
    ("429 retry-after nan", 429, {"retry-after": "nan"}, {"error": {"message": "slow"}}),
    ("429 retry-after -1", 429, {"retry-after": "-1"}, {"error": {"message": "slow"}}),
    ("429 retry-after 1e400", 429, {"retry-after": "1e400"}, {"error": {"message": "slow"}}),
    ("429 retry-after-ms inf", 429, {"retry-after-ms": "inf"}, {"error": {"message": "slow"}}),
    ("429 retry-after a date", 429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, {}),
    ("500 text", 500, {}, b"internal error"),
    ("503 html", 503, {"content-type": "text/html"}, b"<html>down</html>"),
    ("400 error a string", 400, {}, {"error": "bad"}),
    ("404 error a number", 404, {}, {"error": 5}),
    ("418", 418, {}, b""),
    ("204 no content", 204, {}, b""),
    ("201 empty", 201, {}, b""),
    ("200 error message an object", 200, {}, {"error": {"message": {"a": [1]}}}),
    ("500 nested 100k deep", 500, {}, DEEP.encode()),
    # JSON 5xx bodies in neither provider's error shape: the gateway's finding, 502.
    ("500 error without message", 500, {}, {"error": {"type": "server_error"}}),
    ("503 message without error", 503, {"retry-after": "3"}, {"message": "down"}),
    ("529 error message empty", 529, {}, {"type": "error", "error": {"message": ""}}),
    ("500 an array", 500, {}, [{"error": {"message": "x"}}]),
]


def _sse(data: Any) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def _chunk(delta: Any = None, finish: Any = None, **fields: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish}
    return {"id": "c1", "model": "m", "choices": [choice], **fields}


GOOD_START = _sse(_chunk({"role": "assistant", "content": "half"}))
#: (name, raw events) of a streamed OpenAI answer.
OPENAI_STREAMS: list[tuple[str, list[str]]] = [
    ("[DONE] without finish_reason", [GOOD_START, _sse("[DONE]")]),
    ("no [DONE]", [GOOD_START, _sse(_chunk(finish="stop"))]),
    ("choices a string", [_sse({"id": "c1", "choices": "x"}), _sse("[DONE]")]),
    ("usage a string", [GOOD_START, _sse(_chunk(finish="stop", usage="abc")), _sse("[DONE]")]),
    (
        "usage negative",
        [GOOD_START, _sse(_chunk(finish="stop", usage={"prompt_tokens": -5})), _sse("[DONE]")],
    ),
    (
        "usage 10^30",
        [
            GOOD_START,
            _sse(_chunk(finish="stop", usage={"completion_tokens": 10**30})),
            _sse("[DONE]"),
        ],
    ),
    ("in-band error", [GOOD_START, _sse({"error": {"message": "mid", "type": "server_error"}})]),
    ("not JSON", [GOOD_START, _sse("{oops"), _sse("[DONE]")]),
    ("an array", [_sse([1, 2]), _sse("[DONE]")]),
    ("delta a string", [_sse(_chunk("x", "stop")), _sse("[DONE]")]),
    ("content a number", [_sse(_chunk({"content": 5}, "stop")), _sse("[DONE]")]),
    (
        "index a string",
        [_sse({"choices": [{"index": "a", "delta": {"content": "x"}}]}), _sse("[DONE]")],
    ),
    (
        "index 10^30",
        [_sse({"choices": [{"index": 10**30, "delta": {"content": "x"}}]}), _sse("[DONE]")],
    ),
    (
        "tool call without id",
        [
            _sse(
                _chunk(
                    {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]},
                    "tool_calls",
                )
            ),
            _sse("[DONE]"),
        ],
    ),
    ("finish only, no content", [_sse(_chunk({"role": "assistant"}, "stop")), _sse("[DONE]")]),
    ("finish_reason an object", [GOOD_START, _sse(_chunk(finish={"a": 1})), _sse("[DONE]")]),
    ("nested 100k deep", [GOOD_START, _sse(DEEP), _sse("[DONE]")]),
    ("a JSON body, not events", ['{"choices": []}']),
    ("nothing at all", []),
]


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


START = _event("message_start", message={"id": "msg_1", "model": "m", "usage": {"input_tokens": 1}})
BLOCK = _event("content_block_start", index=0, content_block={"type": "text", "text": ""})
TEXT = _event("content_block_delta", index=0, delta={"type": "text_delta", "text": "half"})
STOP_BLOCK = _event("content_block_stop", index=0)
DELTA = _event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1})
END = _event("message_stop")
#: (name, raw events) of a streamed Messages answer.
ANTHROPIC_STREAMS: list[tuple[str, list[str]]] = [
    ("no message_stop", [START, BLOCK, TEXT, STOP_BLOCK, DELTA]),
    ("no stop_reason", [START, BLOCK, TEXT, STOP_BLOCK, END]),
    (
        "usage a string",
        [
            START,
            BLOCK,
            TEXT,
            STOP_BLOCK,
            _event("message_delta", delta={"stop_reason": "end_turn"}, usage="abc"),
            END,
        ],
    ),
    (
        "usage negative",
        [
            START,
            BLOCK,
            TEXT,
            STOP_BLOCK,
            _event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": -5}),
            END,
        ],
    ),
    (
        "message_start usage 10^30",
        [
            _event("message_start", message={"usage": {"input_tokens": 10**30}}),
            BLOCK,
            TEXT,
            DELTA,
            END,
        ],
    ),
    (
        "index a string",
        [
            START,
            BLOCK,
            _event("content_block_delta", index="x", delta={"type": "text_delta", "text": "a"}),
            DELTA,
            END,
        ],
    ),
    ("message a string", [_event("message_start", message="x"), BLOCK, TEXT, DELTA, END]),
    (
        "content_block a string",
        [START, _event("content_block_start", index=0, content_block="x"), TEXT, DELTA, END],
    ),
    (
        "text a number",
        [
            START,
            BLOCK,
            _event("content_block_delta", index=0, delta={"type": "text_delta", "text": 5}),
            DELTA,
            END,
        ],
    ),
    (
        "error event",
        [
            START,
            BLOCK,
            TEXT,
            _event("error", error={"type": "overloaded_error", "message": "busy"}),
        ],
    ),
    (
        "tool_use without id",
        [
            START,
            _event(
                "content_block_start",
                index=0,
                content_block={"type": "tool_use", "name": "f", "input": {}},
            ),
            _event("message_delta", delta={"stop_reason": "tool_use"}),
            END,
        ],
    ),
    ("no content at all", [START, DELTA, END]),
    ("not JSON", [START, "event: content_block_delta\ndata: {oops\n\n", DELTA, END]),
    ("an array", [START, "event: ping\ndata: [1]\n\n", BLOCK, TEXT, DELTA, END]),
    ("nested 100k deep", [START, f"event: ping\ndata: {DEEP}\n\n", BLOCK, TEXT, DELTA, END]),
    ("nothing at all", []),
]


# ------------------------------------------------------------------ the gateway


class Captured(logging.Handler):
    """Every log record of the server (root and uvicorn's loggers) while the module runs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [
            f"{r.name}: {r.getMessage()}"
            for r in self.records
            if r.exc_info or r.levelno >= logging.ERROR or "Traceback" in r.getMessage()
        ]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, Upstream]]:
    with OpenAIUpstream(OPENAI_KEY) as gpt, AnthropicUpstream(ANTHROPIC_KEY) as claude:
        yield {"openai": gpt, "anthropic": claude}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstreams: dict[str, Upstream]
) -> Iterator[tuple[ServerThread, Captured]]:
    root = tmp_path_factory.mktemp("hostile")
    config = gateway_config(
        root,
        {
            "cache": {"embedder": "terms"},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstreams["openai"].url + "/v1",
                    "api_key": OPENAI_KEY,
                    "max_retries": 0,
                },
                "anthropic": {
                    "protocol": "anthropic",
                    "base_url": upstreams["anthropic"].url,
                    "api_key": ANTHROPIC_KEY,
                    "max_retries": 0,
                },
            },
        },
    )
    captured = Captured()
    loggers = [
        logging.getLogger(),
        logging.getLogger("uvicorn"),
        logging.getLogger("uvicorn.error"),
    ]
    with ServerThread(config) as running:
        for logger in loggers:
            logger.addHandler(captured)
        try:
            yield running, captured
        finally:
            for logger in loggers:
                logger.removeHandler(captured)


def _ask(
    http: httpx.Client, route: str, protocol: str, question: str, stream: bool
) -> httpx.Response:
    messages = [{"role": "user", "content": question}]
    body: dict[str, Any] = {"model": MODELS[protocol], "messages": messages, "temperature": 0}
    if stream:
        body["stream"] = True
    if route == "/v1/messages":
        body["max_tokens"] = 64
    return http.post(route, json=body)


def _judge(response: httpx.Response, route: str, stream: bool) -> str | None:
    """What is wrong with the answer to a hostile upstream (None: nothing)."""
    if response.status_code >= 500 and response.status_code != 502 and response.status_code != 504:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    if response.status_code >= 400:
        error = response.json().get("error")
        if not isinstance(error, dict) or not error.get("message"):
            shown = response.text[:200]
            return f"HTTP {response.status_code} without a provider-shaped error: {shown}"
        return None
    if not stream:
        return f"HTTP {response.status_code}, a success: {response.text[:200]}"
    lines = response.text.splitlines()
    errored = any(line.startswith(('data: {"error"', "event: error")) for line in lines)
    ended = "data: [DONE]" in lines or "event: message_stop" in lines
    if not errored or ended:
        return f"a 200 stream without its error event: {response.text[-300:]}"
    return None


ROUTES = ("/v1/chat/completions", "/v1/messages")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_every_hostile_shape_is_a_clean_error_and_is_never_stored(
    server: tuple[ServerThread, Captured],
    upstreams: dict[str, Upstream],
    protocol: str,
    route: str,
) -> None:
    running, captured = server
    upstream = upstreams[protocol]
    bodies = OPENAI_BODIES if protocol == "openai" else ANTHROPIC_BODIES
    streams = OPENAI_STREAMS if protocol == "openai" else ANTHROPIC_STREAMS
    cases: list[tuple[str, bool, dict[str, Any]]] = []
    cases += [(name, False, {"status": s, "body": b}) for name, s, b in bodies]
    cases += [(name, True, {"events": events}) for name, events in streams]
    for name, status, headers, body in STATUSES:
        for stream in (False, True):
            cases.append((name, stream, {"status": status, "headers": headers, "body": body}))
    problems: list[str] = []
    fives = 0
    before = len(captured.tracebacks())
    with httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as http:
        for n, (name, stream, script) in enumerate(cases):
            question = f"Hostile case {n} on {protocol} via {route}: what is {name}?"
            upstream.script(**script)
            answer = _ask(http, route, protocol, question, stream)
            fives += answer.status_code >= 500
            wrong = _judge(answer, route, stream)
            if wrong is not None:
                problems.append(f"{name} (stream={stream}): {wrong}")
            again = _ask(http, route, protocol, question, False)  # a healthy upstream now
            if again.status_code != 200 or again.headers.get("x-evermind-cache") != "miss":
                problems.append(
                    f"{name} (stream={stream}): stored, then {again.status_code} "
                    f"{again.headers.get('x-evermind-cache')}: {again.text[:200]}"
                )
    tracebacks = captured.tracebacks()[before:]
    print(
        f"\n{protocol} via {route}: {len(cases)} hostile inputs, {fives} answered 5xx "
        f"(all 502/504), 0 x 500: {not any('HTTP 500' in p for p in problems)}, "
        f"{len(tracebacks)} tracebacks, {len(problems)} problems"
    )
    assert not problems, "\n".join(problems)
    assert not tracebacks, "\n".join(tracebacks[:10])


def test_a_rate_limit_with_an_infinite_retry_after_is_a_429_without_the_header(
    server: tuple[ServerThread, Captured], upstreams: dict[str, Upstream]
) -> None:
    running, _ = server
    upstreams["openai"].script(429, {"error": {"message": "slow"}}, headers={"retry-after": "inf"})
    with httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as http:
        answer = _ask(http, "/v1/chat/completions", "openai", "Retry when?", False)
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "upstream_rate_limited"
    assert "retry-after" not in answer.headers  # infinite is no wait a client can honour


def test_no_hostile_usage_reaches_the_metrics(
    server: tuple[ServerThread, Captured], upstreams: dict[str, Upstream]
) -> None:
    """Usage of -5 or 10^30 tokens is refused with its answer: /metrics counts only what
    well-formed answers reported (every token counter a whole number in [0, 10^8 x calls])."""
    running, _ = server
    with httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as http:
        for n, usage in enumerate(({"prompt_tokens": -5}, {"completion_tokens": 10**30})):
            upstreams["openai"].script(200, _chat(usage=usage))
            assert (
                _ask(http, "/v1/chat/completions", "openai", f"Usage {n}?", False).status_code
                == 502
            )
        metrics = http.get("/metrics").text
    counts = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(("evermind_gateway_tokens_total", "evermind_gateway_saved_tokens_total"))
    ]
    assert counts and all(0 <= c < 10**9 for c in counts), counts


#: The routes whose clients speak each protocol.
ROUTE_OF = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def _provider_error(protocol: str, status: int, message: str) -> dict[str, Any]:
    """A 5xx body as each provider documents it (Anthropic's ``type`` by status)."""
    if protocol == "openai":
        return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    kind = "overloaded_error" if status == 529 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_an_upstream_5xx_in_its_providers_shape_keeps_its_status_body_and_retry_after(
    server: tuple[ServerThread, Captured],
    upstreams: dict[str, Upstream],
    protocol: str,
    stream: bool,
) -> None:
    """A 500 without retry-after and the provider's overloaded status (503 / 529) with one:
    the client of the upstream's own protocol gets that status, the error object word for
    word (the key it echoed scrubbed), the Retry-After as sent; one upstream call each; and
    nothing is stored (the same question, asked again of a healthy upstream, is a miss)."""
    running, _ = server
    upstream, route = upstreams[protocol], ROUTE_OF[protocol]
    key = OPENAI_KEY if protocol == "openai" else ANTHROPIC_KEY
    overloaded = 503 if protocol == "openai" else 529
    with httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as http:
        for status, wait in ((500, None), (overloaded, "7")):
            question = f"Upstream {status} on {protocol}, stream={stream}: still there?"
            message = f"The server had an error (request with key {key})"
            headers = {} if wait is None else {"retry-after": wait}
            upstream.script(status, _provider_error(protocol, status, message), headers=headers)
            before = len(upstream.requests)
            answer = _ask(http, route, protocol, question, stream)
            assert answer.status_code == status, answer.text
            scrubbed = message.replace(key, "***")
            assert answer.json() == _provider_error(protocol, status, scrubbed)
            assert answer.headers.get("retry-after") == wait
            assert len(upstream.requests) == before + 1
            again = _ask(http, route, protocol, question, False)
            assert again.status_code == 200 and again.headers["x-evermind-cache"] == "miss"


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_across_protocols_an_upstream_5xx_keeps_its_status_in_the_routes_shape(
    server: tuple[ServerThread, Captured], upstreams: dict[str, Upstream], protocol: str
) -> None:
    """An OpenAI client of an Anthropic upstream's 529 (and the reverse, a 503): the status
    and Retry-After are the upstream's, the body the route's own shape quoting its words."""
    running, _ = server
    other = "anthropic" if protocol == "openai" else "openai"
    status = 529 if other == "anthropic" else 503
    upstreams[other].script(
        status, _provider_error(other, status, "Overloaded"), headers={"retry-after": "4"}
    )
    with httpx.Client(base_url=running.url, headers=bearer(TOKEN_A), timeout=30) as http:
        messages = [{"role": "user", "content": f"Across to {other}: busy?"}]
        body: dict[str, Any] = {"model": MODELS[other], "messages": messages, "max_tokens": 64}
        answer = http.post(ROUTE_OF[protocol], json=body)
    assert answer.status_code == status and answer.headers.get("retry-after") == "4"
    error = answer.json()["error"]
    assert "Overloaded" in error["message"]
    if protocol == "anthropic":
        assert answer.json()["type"] == "error" and error["type"] in (
            "api_error",
            "overloaded_error",
        )
    else:
        assert error["type"] == "server_error" and error["code"] == "upstream_unavailable"
