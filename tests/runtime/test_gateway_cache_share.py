"""The tab's L2: ``/v1/gateway/cache`` and its client, against a real ``evermind serve``.

``evermind serve --upstreams`` (terms embedder, verified decision at δ = 0.01) in front of
the loopback OpenAI server of :mod:`tests.upstreams`. An answer stored through
:class:`~evermind.cache.gateway_client.GatewayCacheClient` (what the Studio's tab uses, over
httpx here instead of ``fetch``) is served to an agent (the official ``openai`` SDK) with
no upstream call, and an answer the agent paid for is served to the client; the Studio's
``cache_lookup``/``cache_store`` handlers do the same natively with a runtime named. The
shared cases are exact repeats (the gateway's cache holds fewer than MIN_CALIBRATION
questions of the scope, so it serves repeats only), plus one paraphrase after ten stored
questions, where the calibration exists (with ``verify_until_bounded = false``: a gateway by
default checks such hits against the upstream until its checks bound the error). Failures
(unreachable, wrong token, a model the gateway does not serve) leave the tab on L1 with a
note; other tenants see nothing.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from evermind.cache.gateway_client import GatewayCacheClient
from evermind.cache.l2 import HttpRequest, HttpResponse, Transport
from evermind.errors import StorageError
from evermind.runtime.config import RuntimeConfig
from evermind.runtime.server import ServerThread
from evermind.studio import api, memory_api, rpc
from tests.runtime.helpers import TOKEN_A, TOKEN_A_READ, TOKEN_B, gateway_config, write_tokens
from tests.upstreams import OpenAIUpstream

MODEL = "openai/gpt-4o-mini"
OPENAI_KEY = "sk-loopback-share"


def httpx_transport() -> Transport:
    """The client's transport natively (the tab's is ``fetch``)."""

    async def send(request: HttpRequest) -> HttpResponse:
        async with httpx.AsyncClient() as client:
            answer = await client.request(
                request.method, request.url, headers=request.headers, content=request.body
            )
        return HttpResponse(answer.status_code, answer.content)

    return send


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(OPENAI_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def runtime(
    tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIUpstream
) -> Iterator[ServerThread]:
    config = gateway_config(
        tmp_path_factory.mktemp("share"),
        {
            # Sharing is what this file tests: the gateway serves from the shipped bound at
            # once instead of first checking its would-be hits against the upstream (that
            # default, verify_until_bounded, is tested in test_gateway_verified.py).
            "cache": {"embedder": "terms", "verify_until_bounded": False},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstream.url + "/v1",
                    "api_key": OPENAI_KEY,
                    "max_retries": 0,
                }
            },
        },
    )
    with ServerThread(config) as running:
        yield running


def client(runtime: ServerThread, token: str = TOKEN_A, **kw: Any) -> GatewayCacheClient:
    return GatewayCacheClient(runtime.url, token, MODEL, transport=httpx_transport(), **kw)


def agent_asks(runtime: ServerThread, question: str, token: str = TOKEN_A) -> tuple[str, str]:
    """The agent's answer through the gateway and the ``x-evermind-cache`` header."""
    sdk = openai.OpenAI(base_url=runtime.url + "/v1", api_key=token, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": question}], temperature=0
    )
    answer = raw.parse().choices[0].message.content or ""
    return answer, raw.headers.get("x-evermind-cache", "")


def test_an_answer_stored_by_the_client_is_served_to_an_agent_and_back(
    runtime: ServerThread, upstream: OpenAIUpstream
) -> None:
    question = "Which port does the staging database listen on?"
    stored = asyncio.run(client(runtime).store(question, "Port 6543, behind the VPN."))
    assert stored is None
    before = len(upstream.requests)
    answer, status = agent_asks(runtime, question)
    assert (answer, status) == ("Port 6543, behind the VPN.", "hit-l1")
    assert len(upstream.requests) == before, "the upstream was called for a served question"

    # The other way: the agent pays once, the client is served the same answer.
    paid = "Who rotates the on-call pager this week?"
    answer, status = agent_asks(runtime, paid)
    assert status == "miss" and len(upstream.requests) == before + 1
    hit, words = asyncio.run(client(runtime).lookup(paid))
    assert hit is not None, words
    assert hit.response == answer and hit.score == pytest.approx(1.0)
    assert hit.query == paid  # the same principal stored it
    assert len(upstream.requests) == before + 1

    # Another tenant shares nothing, and a question never stored misses.
    other, words = asyncio.run(client(runtime, TOKEN_B).lookup(question))
    assert other is None and words
    missing, words = asyncio.run(client(runtime).lookup("What is the VPN's DNS suffix?"))
    assert missing is None and words


def test_a_paraphrase_is_shared_once_the_scope_is_calibrated(
    runtime: ServerThread, upstream: OpenAIUpstream
) -> None:
    system = "You answer questions about the office."  # a scope of its own: empty at first
    share = client(runtime, system=system)
    facts = [
        ("When does the cafeteria open on weekdays?", "At 8:00."),
        ("Where is the bicycle storage room located?", "Basement level 2."),
        ("How do I book a meeting room for Friday?", "Use the Rooms app."),
        ("Who approves expense reports over 500 euros?", "Your director."),
        ("What is the guest wifi password?", "Ask reception; it rotates daily."),
        ("Which floor hosts the finance department?", "The fourth floor."),
        ("How many parking spots are reserved for visitors?", "Twelve."),
        ("When is the building closed for maintenance?", "The first Sunday of each month."),
        ("What is the phone number of the security desk?", "Extension 4411."),
        ("Where can I print large posters?", "The copy room on floor 1."),
    ]
    for question, answer in facts:
        assert asyncio.run(share.store(question, answer)) is None
    sdk = openai.OpenAI(base_url=runtime.url + "/v1", api_key=TOKEN_A, max_retries=0)
    before = len(upstream.requests)
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": "When will the cafeteria open on weekdays?"},
        ],
        temperature=0,
    )
    assert raw.headers.get("x-evermind-cache") == "hit-l1", raw.parse().model_extra
    assert raw.parse().choices[0].message.content == "At 8:00."
    assert len(upstream.requests) == before


def test_failures_leave_the_client_with_one_line(runtime: ServerThread) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    gone = GatewayCacheClient(
        f"http://127.0.0.1:{closed}", TOKEN_A, MODEL, transport=httpx_transport()
    )
    with pytest.raises(StorageError, match="could not reach"):
        asyncio.run(gone.lookup("anything"))
    with pytest.raises(StorageError, match="HTTP 401"):
        asyncio.run(client(runtime, "not-a-token").lookup("anything"))
    local = "evermind/tiny"  # a local model, not the gateway's
    unknown = GatewayCacheClient(runtime.url, TOKEN_A, local, transport=httpx_transport())
    with pytest.raises(StorageError, match="HTTP 404"):
        asyncio.run(unknown.lookup("anything"))

    async def slow(request: HttpRequest) -> HttpResponse:
        await asyncio.sleep(5)
        return HttpResponse(200, b"{}")

    late = GatewayCacheClient(runtime.url, TOKEN_A, MODEL, transport=slow, timeout_s=0.2)
    with pytest.raises(StorageError, match=r"did not answer within 0\.2 s"):
        asyncio.run(late.lookup("anything"))
    # A temperature above 0 is not cacheable for the gateway: refused in words, not stored.
    warm = client(runtime, temperature=0.7)
    assert "temperature" in str(asyncio.run(warm.store("Is it warm?", "Yes.")))
    # Bad input is a 400 in words, never a 500.
    answer = httpx.post(
        f"{runtime.url}/v1/gateway/cache/store",
        headers={"Authorization": f"Bearer {TOKEN_A}"},
        json={"model": MODEL, "query": "", "response": 3},
    )
    assert answer.status_code == 400 and "query" in answer.json()["error"]["message"]


def test_a_runtime_without_a_gateway_says_so(tmp_path: Any) -> None:
    config = RuntimeConfig(
        data_dir=tmp_path / "data", port=0, tokens_file=write_tokens(tmp_path / "tokens.txt")
    )
    with ServerThread(config) as plain:
        with pytest.raises(StorageError, match="HTTP 404: this runtime has no gateway cache"):
            asyncio.run(client(plain).lookup("anything"))
        answer = httpx.post(
            f"{plain.url}/v1/gateway/cache/store",
            headers={"Authorization": f"Bearer {TOKEN_A_READ}"},
            json={"model": MODEL, "query": "q", "response": "a"},
        )
        assert answer.status_code == 403, answer.text  # storing needs write access


def test_a_tenant_in_a_shared_group_may_look_up_but_not_store(
    tmp_path: Any, upstream: OpenAIUpstream
) -> None:
    config = gateway_config(
        tmp_path,
        {
            "cache": {"embedder": "terms", "shared": {"alpha": "team", "bravo": "team"}},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstream.url + "/v1",
                    "api_key": OPENAI_KEY,
                    "max_retries": 0,
                }
            },
        },
    )
    with ServerThread(config) as grouped:
        question = "Where is the team's shared calendar?"
        answer, status = agent_asks(grouped, question, TOKEN_B)  # bravo pays for it
        assert status == "miss"
        hit, words = asyncio.run(client(grouped).lookup(question))  # alpha, same group
        assert hit is not None and hit.response == answer and hit.query is None, words
        with pytest.raises(StorageError, match="HTTP 403: tenant 'alpha' shares"):
            asyncio.run(client(grouped).store("Who is on call?", "Nobody, ever."))


# --- the Studio's handlers natively: the tab's cache with the runtime as L2 ---------------


@pytest.fixture
def fresh_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(rpc, "_session", None)
    monkeypatch.setattr(memory_api, "_tab", None)
    monkeypatch.setattr(memory_api, "runtime_transport", httpx_transport)
    yield


def call(fn: str, **kwargs: Any) -> Any:
    envelope = json.loads(asyncio.run(api.call(fn, json.dumps(kwargs))))
    if not envelope["ok"]:
        raise AssertionError(f"{fn} failed: {envelope['error']}")
    return envelope["result"]


def test_the_tab_cache_goes_l1_then_l2(
    runtime: ServerThread, upstream: OpenAIUpstream, fresh_session: None
) -> None:
    share = {"url": runtime.url, "token": TOKEN_A, "model": MODEL}
    question = "What is the name of the release train for March?"
    stored = call("cache_store", query=question, response="Aurora.", runtime=share)
    assert stored["stored"] and stored["l2"] == "stored in the runtime's gateway cache too"
    before = len(upstream.requests)
    assert agent_asks(runtime, question) == ("Aurora.", "hit-l1")
    assert len(upstream.requests) == before

    paid = "Which team owns the billing service?"
    answer, status = agent_asks(runtime, paid)
    assert status == "miss"
    served = call("cache_lookup", query=paid, runtime=share)
    assert served["hit"] and served["tier"] == "l2" and served["response"] == answer, served
    assert "served from l2" in served["reason"]
    again = call("cache_lookup", query=paid, runtime=share)  # kept in L1
    assert again["hit"] and again["tier"] == "l1" and again["l2"] == "not asked: L1 served it"

    # The runtime gone: L1 still answers, the note says why L2 was not asked.
    gone = {**share, "url": "http://127.0.0.1:9"}
    local = call("cache_lookup", query=question, runtime=gone)
    assert local["hit"] and local["tier"] == "l1"
    missed = call("cache_lookup", query="Where are the spare laptops?", runtime=gone)
    assert not missed["hit"] and missed["l2"].startswith("L1 only: runtime cache: could not")
    kept = call(
        "cache_store", query="Where are the spare laptops?", response="IT room.", runtime=gone
    )
    assert kept["stored"] and kept["l2"].startswith("L1 only:")
    assert not call("cache_lookup", query=question, runtime=None).get("l2")
