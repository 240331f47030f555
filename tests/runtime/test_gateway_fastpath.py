"""The OpenAI bridge's fast path: ``generate`` posts on one pooled aiohttp session instead of
the SDK's request path, and answers, fails and retries exactly as the SDK path does.

Each test runs the same calls two ways against a loopback Chat Completions server: through a
bridge that built its own client (the fast path) and through one given a ready
``openai.AsyncOpenAI`` (the SDK's own request path, as before), and compares what the server
received and what the caller got.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import openai
import pytest
from starlette.requests import Request

from evermind.bridges.base import ChatRequest, Completion, Message
from evermind.bridges.openai import OpenAIBridge
from evermind.errors import UpstreamError
from tests.upstreams import OpenAIUpstream, default_reply

T = TypeVar("T")

#: The headers the SDK itself decides (auth, identity, retry bookkeeping), compared one by one.
SDK_HEADERS = ("authorization", "user-agent", "content-type", "accept", "content-length")


class PortRecording(OpenAIUpstream):
    """The loopback upstream, also noting the client port of every request."""

    def __init__(self) -> None:
        super().__init__()
        self.ports: list[int] = []

    def _authorised(self, request: Request) -> bool:
        if request.client is not None:
            self.ports.append(request.client.port)
        return super()._authorised(request)


@pytest.fixture(scope="module")
def gpt() -> Iterator[PortRecording]:
    with PortRecording() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def fresh(gpt: PortRecording) -> None:
    gpt.reset()
    gpt.ports.clear()


def ask(text: str) -> ChatRequest:
    return ChatRequest(model="gpt-4.1-mini", messages=(Message("user", text),), max_tokens=50)


def run(
    gpt: OpenAIUpstream, fast: bool, use: Callable[[OpenAIBridge], Awaitable[T]], retries: int = 0
) -> T:
    """``use`` on a fresh bridge: its own client (``fast``) or a ready SDK client."""

    async def main() -> T:
        url = gpt.url + "/v1"
        if fast:
            bridge = OpenAIBridge(api_key=gpt.api_key, base_url=url, max_retries=retries)
        else:
            client = openai.AsyncOpenAI(
                api_key=gpt.api_key, base_url=url, max_retries=retries, timeout=60.0
            )
            bridge = OpenAIBridge(client=client)
        try:
            return await use(bridge)
        finally:
            await bridge.aclose()
            if not fast:
                await client.close()

    return asyncio.run(main())


def failure(gpt: OpenAIUpstream, fast: bool, retries: int = 0) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        run(gpt, fast, lambda b: b.generate(ask("hello")), retries)
    return caught.value


def described(err: UpstreamError) -> dict[str, Any]:
    return {"type": type(err), "message": str(err), **vars(err)}


def test_generate_does_not_go_through_the_sdk_request_path(gpt: PortRecording) -> None:
    async def use(bridge: OpenAIBridge) -> Completion:
        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("generate went through the SDK's request path")

        bridge._client.post = refuse  # type: ignore[method-assign]
        return await bridge.generate(ask("What is the capital of France?"))

    done = run(gpt, True, use)
    assert done.text == default_reply("What is the capital of France?")


def test_one_keep_alive_connection_is_reused(gpt: PortRecording) -> None:
    async def use(bridge: OpenAIBridge) -> list[str]:
        return [(await bridge.generate(ask(f"question {i}"))).text for i in range(6)]

    texts = run(gpt, True, use)
    assert texts == [default_reply(f"question {i}") for i in range(6)]
    assert len(gpt.ports) == 6 and len(set(gpt.ports)) == 1


def test_the_request_is_the_sdk_paths(gpt: PortRecording) -> None:
    sent = {}
    for fast in (True, False):
        gpt.reset()
        done = run(gpt, fast, lambda b: b.generate(ask("Where is Lyon?")))
        assert done.text == default_reply("Where is Lyon?")
        (recorded,) = gpt.requests
        stainless = {k: v for k, v in recorded.headers.items() if k.startswith("x-stainless-")}
        sent[fast] = (
            recorded.path,
            recorded.body,
            {k: recorded.headers.get(k) for k in SDK_HEADERS},
            stainless,
        )
    assert sent[True] == sent[False]
    assert sent[True][2]["authorization"] == f"Bearer {gpt.api_key}"
    assert sent[True][3]["x-stainless-retry-count"] == "0"


@pytest.mark.parametrize(
    ("kind", "retry_after"),
    [
        ("rate_limit", 7.0),
        ("rate_limit", None),
        ("server_error", None),
        ("overloaded", 3.0),
        ("auth", None),
    ],
)
def test_failures_map_as_on_the_sdk_path(
    gpt: PortRecording, kind: str, retry_after: float | None
) -> None:
    errors = {}
    for fast in (True, False):
        gpt.fail(kind, retry_after=retry_after)
        errors[fast] = described(failure(gpt, fast))
    assert errors[True] == errors[False]
    assert errors[True]["code"].startswith("upstream_")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}),
        (404, {"error": {"message": "The model does not exist", "code": "model_not_found"}}),
        (502, "<html>Bad Gateway</html>"),
        (500, {"detail": "not OpenAI's error shape"}),
    ],
)
def test_scripted_failures_map_as_on_the_sdk_path(
    gpt: PortRecording, status: int, body: Any
) -> None:
    errors = {}
    for fast in (True, False):
        gpt.script(status, body)
        errors[fast] = described(failure(gpt, fast))
    assert errors[True] == errors[False]


def test_a_cut_body_is_a_broken_off_answer(gpt: PortRecording) -> None:
    codes = {}
    for fast in (True, False):
        gpt.fail("cut")
        codes[fast] = failure(gpt, fast).code
    assert codes[True] == codes[False] == "upstream_unavailable"


def test_retries_as_the_sdk_does(gpt: PortRecording) -> None:
    counts = {}
    for fast in (True, False):
        gpt.reset()
        gpt.fail("rate_limit", times=2, retry_after=0.05)
        done = run(gpt, fast, lambda b: b.generate(ask("hello again")), retries=2)
        assert done.text == default_reply("hello again")
        counts[fast] = [r.headers["x-stainless-retry-count"] for r in gpt.requests]
    assert counts[True] == counts[False] == ["0", "1", "2"]


def test_no_retries_left_raises_the_last_failure(gpt: PortRecording) -> None:
    errors = {}
    for fast in (True, False):
        gpt.reset()
        gpt.fail("server_error", times=2)
        errors[fast] = described(failure(gpt, fast, retries=1))
        assert len(gpt.requests) == 2
    assert errors[True] == errors[False]
    assert errors[True]["code"] == "upstream_unavailable"


def test_an_unreachable_upstream_fails_as_on_the_sdk_path() -> None:
    async def attempt(fast: bool) -> UpstreamError:
        url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
        if fast:
            bridge = OpenAIBridge(api_key="k", base_url=url, max_retries=0)
        else:
            bridge = OpenAIBridge(
                client=openai.AsyncOpenAI(api_key="k", base_url=url, max_retries=0)
            )
        try:
            await bridge.generate(ask("hello"))
        except UpstreamError as err:
            return err
        finally:
            await bridge.aclose()
            await bridge._client.close()
        raise AssertionError("an unreachable upstream answered")

    fast, sdk = (asyncio.run(attempt(f)) for f in (True, False))
    assert described(fast) == described(sdk)
    assert fast.code == "upstream_unavailable"


def test_a_proxied_upstream_keeps_the_sdk_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment's proxy applies to the SDK's httpx client; the pooled session does
    not read it, so a proxied upstream is posted to through the SDK, as before."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    url = "http://10.1.2.3:8000/v1"
    assert not OpenAIBridge(api_key="k", base_url=url)._fast
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    monkeypatch.setenv("no_proxy", "10.1.2.3")
    assert OpenAIBridge(api_key="k", base_url=url)._fast


def test_a_bridge_used_from_a_second_event_loop_gets_a_new_session(gpt: PortRecording) -> None:
    bridge = OpenAIBridge(api_key=gpt.api_key, base_url=gpt.url + "/v1", max_retries=0)

    async def once(text: str) -> str:
        return (await bridge.generate(ask(text))).text

    try:
        assert asyncio.run(once("first loop")) == default_reply("first loop")
        assert asyncio.run(once("second loop")) == default_reply("second loop")
    finally:
        asyncio.run(bridge.aclose())
    assert len(gpt.requests) == 2
