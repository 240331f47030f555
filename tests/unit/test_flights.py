"""Single-flight in ``CachingBridge`` (``bridges/flights.py``), without HTTP: the corners the
gateway test cannot reach on purpose: a leader's outcome dropped unused, a follower
cancelled while it waits, a scope that keeps principals apart never coalescing them."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

from evermind.bridges import ChatRequest, Completion, Delta, Message, Usage
from evermind.bridges.caching import CachePolicy, CachingBridge, TermEmbedder
from evermind.cache import SemanticCache


class SlowBridge:
    """Answers after a pause that the test releases."""

    provider = "openai"
    last_usage: Usage | None = None

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def generate(self, request: ChatRequest) -> Completion:
        self.calls += 1
        await self.release.wait()
        return Completion(f"answer {self.calls}", request.model, "openai")

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        yield Delta(completion=await self.generate(request))

    async def aclose(self) -> None:
        pass


def ask(user: str = "u1") -> ChatRequest:
    return ChatRequest(
        model="m", messages=(Message("user", "Why is the sky blue?"),), temperature=0, user=user
    )


def make(policy: CachePolicy | None = None) -> tuple[CachingBridge, SlowBridge]:
    upstream = SlowBridge()
    return CachingBridge(upstream, SemanticCache(TermEmbedder()), policy), upstream


def test_a_leader_dropped_unused_lands_and_a_follower_leads() -> None:
    async def scenario() -> tuple[str, int]:
        bridge, upstream = make()
        leader = await bridge.open(ask())
        assert leader.status == "miss" and len(bridge.flights) == 1
        follower = asyncio.ensure_future(bridge.generate(ask()))
        await asyncio.sleep(0.01)
        assert not follower.done()  # it waits on the leader's flight
        del leader  # dropped without complete(): the flight lands when it is collected
        gc.collect()
        await asyncio.sleep(0.01)
        upstream.release.set()
        answer = await asyncio.wait_for(follower, 5)
        return answer.text, upstream.calls

    assert asyncio.run(scenario()) == ("answer 1", 1)


def test_a_cancelled_follower_leaves_the_flight_alone() -> None:
    async def scenario() -> tuple[list[str], int, int]:
        bridge, upstream = make()
        leader = asyncio.ensure_future(bridge.generate(ask()))
        await asyncio.sleep(0.01)
        quitter = asyncio.ensure_future(bridge.generate(ask()))
        stayer = asyncio.ensure_future(bridge.generate(ask()))
        await asyncio.sleep(0.01)
        quitter.cancel()
        await asyncio.sleep(0.01)
        upstream.release.set()
        done = await asyncio.gather(leader, stayer)
        return [c.text for c in done], upstream.calls, bridge.flights.coalesced

    texts, calls, coalesced = asyncio.run(scenario())
    assert texts == ["answer 1", "answer 1"] and calls == 1 and coalesced == 2


def test_principals_the_scope_keeps_apart_never_coalesce() -> None:
    async def scenario() -> int:
        bridge, upstream = make(CachePolicy(scope="user"))
        calls = [asyncio.ensure_future(bridge.generate(ask(f"u{n}"))) for n in range(3)]
        await asyncio.sleep(0.01)
        upstream.release.set()
        await asyncio.gather(*calls)
        return upstream.calls

    assert asyncio.run(scenario()) == 3  # three audiences, three answers
