"""A new provider joins in one place: the protocol registry (``evermind.bridges.protocols``).

A made-up provider, ``acme``, with a wire of its own (its path, key header, body, response
and stream shapes) is registered in the registry and nowhere else. Then the gateway's config
parser accepts ``protocol = "acme"``, the gateway resolves ``acme/<model>`` to the bridge the
registry builds and answers through it, and the tab's ``FetchBridge`` sends acme's request
and reads acme's answers (JSON and a stream). ``pyodide`` does not exist natively, so a
recording ``pyodide.http.pyfetch`` stands in for the page's ``fetch``: the bridge's own code
runs unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import pytest

from evermind.bridges import ChatRequest, Completion, Delta, Message, Usage, protocols
from evermind.bridges.fetch import FetchBridge
from evermind.errors import ConfigError
from evermind.runtime.gateway.config import GatewayConfig
from evermind.runtime.gateway.core import Gateway
from evermind.runtime.metrics import Metrics
from evermind.tokens import Principal

REQUEST = ChatRequest(model="rocket-1", messages=(Message("user", "How far is the moon?"),))


# ------------------------------------------------------------------ the made-up provider


def acme_body(request: ChatRequest, stream: bool) -> dict[str, Any]:
    return {"engine": request.model, "ask": request.messages[-1].text(), "live": stream}


def acme_completion(data: Mapping[str, Any], provider: str) -> Completion:
    used = data.get("spent") or {}
    usage = Usage(input_tokens=int(used.get("in", 0)), output_tokens=int(used.get("out", 0)))
    return Completion(str(data["said"]), str(data["engine"]), provider, usage=usage)


class AcmeFold:
    """Acme streams ``{"piece": text}`` events and ends with ``{"over": {...}}``."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False
        self._pieces: list[str] = []
        self._final: dict[str, Any] = {}

    def feed(self, event: Mapping[str, Any]) -> str:
        if "over" in event:
            self.done = True
            self._final = dict(event["over"])
            return ""
        self._pieces.append(str(event["piece"]))
        return self._pieces[-1]

    def completion(self) -> Completion:
        return acme_completion({**self._final, "said": "".join(self._pieces)}, self.provider)


def acme_server(body: dict[str, Any]) -> dict[str, Any]:
    """What acme's API answers to a body (the SDK below and the fetch stand-in both use it)."""
    return {"said": f"acme says: {body['ask']}", "engine": body["engine"], "spent": {"in": 7}}


class AcmeSdkBridge:
    """The native bridge acme's "SDK" gives: it speaks acme's wire to :func:`acme_server`."""

    provider = "acme"
    built: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, **options: Any) -> None:
        AcmeSdkBridge.built.append(options)
        self._last: Usage | None = None

    @property
    def last_usage(self) -> Usage | None:
        return self._last

    async def generate(self, request: ChatRequest) -> Completion:
        done = acme_completion(acme_server(acme_body(request, False)), self.provider)
        self._last = done.usage
        return done

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        done = await self.generate(request)
        yield Delta(text=done.text)
        yield Delta(completion=done)

    async def aclose(self) -> None:
        return None


ACME = protocols.WireProtocol(
    name="acme",
    path="/acme/v2/ask",
    headers=lambda key: {"x-acme-key": key},
    body=acme_body,
    completion=acme_completion,
    stream=AcmeFold,
    stream_end="an over event",
    sdk=AcmeSdkBridge,
)


@pytest.fixture
def acme() -> Iterator[protocols.WireProtocol]:
    protocols.register(ACME)
    AcmeSdkBridge.built.clear()
    try:
        yield ACME
    finally:
        protocols.unregister("acme")


# ------------------------------------------------------------------ the three readers


def test_the_gateway_config_takes_a_registered_protocol_and_only_those(acme: Any) -> None:
    raw = {"upstreams": {"acme": {"api_key": "k-acme-1234"}, "rockets": {"protocol": "acme"}}}
    config = GatewayConfig.parse(raw, "up.toml", {})
    assert config.upstreams["acme"].protocol == "acme"  # the default: the upstream's name
    assert config.upstreams["rockets"].protocol == "acme"
    protocols.unregister("acme")
    with pytest.raises(
        ConfigError, match=r"protocol must be one of \('anthropic', 'openai', 'vertex'\)"
    ):
        GatewayConfig.parse(raw, "up.toml", {})


def test_the_gateway_resolves_and_answers_through_the_registered_sdk_bridge(acme: Any) -> None:
    raw = {"cache": {"embedder": "none"}, "upstreams": {"acme": {"api_key": "k-acme-1234"}}}
    config = GatewayConfig.parse(raw, "up.toml", {})

    async def body() -> Completion:
        with ThreadPoolExecutor(1) as executor:
            gateway = Gateway(config, None, executor, Metrics())
            resolved = gateway.resolve("acme/rocket-1", Principal("alpha", "write"))
            assert resolved is not None and resolved.model == "rocket-1"
            request = ChatRequest("rocket-1", REQUEST.messages, tenant="alpha")
            opened = await gateway.open_call(resolved, request, stream=False)
            await gateway.aclose()
            assert opened.completion is not None
            return opened.completion

    completion = asyncio.run(body())
    assert completion.text == "acme says: How far is the moon?"
    assert completion.provider == "acme" and completion.usage.input_tokens == 7
    (options,) = AcmeSdkBridge.built
    assert options["api_key"] == "k-acme-1234" and options["max_retries"] == 2


class _Response:
    """What ``pyfetch`` resolves to, as far as ``FetchBridge`` reads it."""

    def __init__(self, text: str) -> None:
        self.ok, self.status, self.headers = True, 200, {}
        self.js_response = types.SimpleNamespace(body=None)  # no ReadableStream: read whole
        self._text = text

    async def string(self) -> str:
        return self._text


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Installs a ``pyodide.http.pyfetch`` that answers as acme's API and records each call."""
    calls: list[dict[str, Any]] = []

    async def pyfetch(url: str, method: str, headers: dict[str, str], body: str) -> _Response:
        sent = json.loads(body)
        calls.append({"url": url, "method": method, "headers": headers, "body": sent})
        answer = acme_server(sent)
        if not sent["live"]:
            return _Response(json.dumps(answer))
        words = answer["said"].split(" ")
        events = [{"piece": w + (" " if i < len(words) - 1 else "")} for i, w in enumerate(words)]
        events.append({"over": {"engine": answer["engine"], "spent": answer["spent"]}})
        return _Response("".join(f"data: {json.dumps(e)}\n\n" for e in events))

    http = types.ModuleType("pyodide.http")
    http.pyfetch = pyfetch  # type: ignore[attr-defined]
    package = types.ModuleType("pyodide")
    package.http = http  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyodide", package)
    monkeypatch.setitem(sys.modules, "pyodide.http", http)
    return calls


def test_the_fetch_bridge_speaks_the_registered_wire(
    acme: Any, fetched: list[dict[str, Any]]
) -> None:
    bridge = FetchBridge("acme", "https://api.acme.test/", "k-acme-1234")

    async def body() -> tuple[Completion, list[str], Completion | None]:
        whole = await bridge.generate(REQUEST)
        texts, last = [], None
        async for delta in bridge.stream(REQUEST):
            if delta.completion is None:
                texts.append(delta.text)
            else:
                last = delta.completion
        return whole, texts, last

    whole, texts, streamed = asyncio.run(body())
    first = fetched[0]
    assert first["url"] == "https://api.acme.test/acme/v2/ask" and first["method"] == "POST"
    assert first["headers"]["x-acme-key"] == "k-acme-1234"
    assert first["body"] == {"engine": "rocket-1", "ask": "How far is the moon?", "live": False}
    assert whole.text == "acme says: How far is the moon?" and whole.provider == "acme"
    assert fetched[1]["body"]["live"] is True
    assert len(texts) == 7 and "".join(texts) == whole.text  # one delta per streamed word
    assert streamed is not None and streamed.text == whole.text
    assert streamed.usage == whole.usage == Usage(input_tokens=7)


def test_the_registry_refuses_what_would_be_ambiguous(acme: Any) -> None:
    assert protocols.names()[:2] == ("anthropic", "openai") and "acme" in protocols.names()
    with pytest.raises(ConfigError, match="'acme' is registered already"):
        protocols.register(ACME)
    for bad in ("", "two words", "a/b"):
        with pytest.raises(ConfigError, match="one word"):
            protocols.register(protocols.WireProtocol(**{**ACME.__dict__, "name": bad}))
    with pytest.raises(ConfigError, match=r"FetchBridge: protocol must be one of .*got 'zeta'"):
        FetchBridge("zeta", "https://x.test", "key")
    with pytest.raises(ConfigError, match="got \\['acme'\\]"):
        protocols.lookup(["acme"], "up.toml")  # a config value of the wrong type
