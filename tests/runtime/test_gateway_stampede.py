"""A stampede of identical misses makes one upstream call (issue 35, item 14).

``evermind serve --upstreams`` on loopback, an upstream that takes 0.5 s to answer. 20
identical temperature-0 requests at once on a cold cache: 1 upstream call (was 20), one
``miss`` and 19 ``hit-l1`` with the same answer. When that one call fails, all 20 get its
error (1 call, not 20). When the leader's client goes away mid-stream, the waiting requests
are not stranded: one of them leads a new call and all are answered. Streams and JSON
requests coalesce alike.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evermind.runtime.server import ServerThread
from tests.runtime.helpers import TOKEN_A, bearer, gateway_config
from tests.upstreams import OpenAIUpstream

KEY = "sk-stampede-5e4d3c2b1a"
CROWD = 20


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream(KEY, latency_s=0.5) as gpt:
        yield gpt


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIUpstream
) -> Iterator[ServerThread]:
    config = gateway_config(
        tmp_path_factory.mktemp("stampede"),
        {
            # No paid checks: this module counts upstream calls, and a request the busy machine
            # delays past the flight would meet a stored answer and may be drawn for a check
            # (a waiter never is: bridges/caching.py). Checks are test_gateway_verified.py's.
            "cache": {"embedder": "terms", "verify_sample": 0.0},
            "upstreams": {
                "openai": {
                    "protocol": "openai",
                    "base_url": upstream.url + "/v1",
                    "api_key": KEY,
                    "max_retries": 0,
                }
            },
        },
    )
    with ServerThread(config) as running:
        yield running


def body(question: str, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "openai/gpt-4o-mini",
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "stream": stream,
    }


async def crowd(server: ServerThread, question: str, streams: int = 0) -> list[httpx.Response]:
    """``CROWD`` identical requests at once (the first ``streams`` of them streamed)."""
    limits = httpx.Limits(max_connections=CROWD + 5)
    async with httpx.AsyncClient(
        base_url=server.url, headers=bearer(TOKEN_A), timeout=30, limits=limits
    ) as http:
        calls = [
            http.post("/v1/chat/completions", json=body(question, stream=n < streams))
            for n in range(CROWD)
        ]
        return list(await asyncio.gather(*calls))


def text_of(response: httpx.Response) -> str:
    if response.headers["content-type"].startswith("text/event-stream"):
        return "".join(
            (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
            for line in response.text.splitlines()
            if line.startswith("data: {")
        )
    return str(response.json()["choices"][0]["message"]["content"])


def test_identical_concurrent_misses_make_one_upstream_call(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    question = "What does a stampede of identical requests cost?"
    before = len(upstream.requests)
    answers = asyncio.run(crowd(server, question, streams=5))
    calls = len(upstream.requests) - before
    statuses = sorted(a.headers["x-evermind-cache"] for a in answers)
    print(f"\n{CROWD} identical concurrent misses: {calls} upstream call(s); {statuses}")
    assert calls == 1
    assert all(a.status_code == 200 for a in answers)
    assert {text_of(a) for a in answers} == {f"Answer to: {question}"}
    assert statuses.count("miss") == 1 and statuses.count("hit-l1") == CROWD - 1


def test_the_one_call_s_error_reaches_every_waiter(
    server: ServerThread, upstream: OpenAIUpstream
) -> None:
    question = "What happens when the one call of a stampede fails?"
    before = len(upstream.requests)
    upstream.script(429, {"error": {"message": "slow down"}}, headers={"retry-after": "2"})
    answers = asyncio.run(crowd(server, question))
    assert len(upstream.requests) - before == 1
    assert [a.status_code for a in answers] == [429] * CROWD
    assert {a.json()["error"]["code"] for a in answers} == {"upstream_rate_limited"}
    # nothing was stored, and nothing is stuck: the next request is a fresh call
    later = asyncio.run(crowd(server, question))
    assert [a.status_code for a in later] == [200] * CROWD
    assert len(upstream.requests) - before == 2


def test_a_leader_that_goes_away_strands_no_waiter(tmp_path: Any) -> None:
    with OpenAIUpstream(KEY, reply=lambda t: "slow " * 40, chunk_delay_s=0.05) as slow:
        config = gateway_config(
            tmp_path,
            {
                "cache": {"embedder": "terms", "verify_sample": 0.0},
                "upstreams": {
                    "openai": {
                        "protocol": "openai",
                        "base_url": slow.url + "/v1",
                        "api_key": KEY,
                        "max_retries": 0,
                    }
                },
            },
        )
        with ServerThread(config) as running:
            question = "Who answers when the first asker leaves?"

            async def scenario() -> list[httpx.Response]:
                async with httpx.AsyncClient(
                    base_url=running.url, headers=bearer(TOKEN_A), timeout=30
                ) as http:
                    leader = http.stream("POST", "/v1/chat/completions", json=body(question, True))
                    async with leader as response:
                        async for _line in response.aiter_lines():
                            break  # the leader is streaming: now the crowd arrives
                        waiting = [
                            asyncio.ensure_future(
                                http.post("/v1/chat/completions", json=body(question))
                            )
                            for _ in range(5)
                        ]
                        await asyncio.sleep(0.3)  # they wait on the leader's flight
                    # the leader went away mid-stream
                    return list(await asyncio.wait_for(asyncio.gather(*waiting), 20))

            answers = asyncio.run(scenario())
    assert [a.status_code for a in answers] == [200] * 5
    assert {text_of(a) for a in answers} == {("slow " * 40).strip()}
    assert "aborted" in slow.stream_ends and len(slow.requests) == 2  # one new leader
