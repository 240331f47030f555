"""RoutedBridge: the router's decision picks the bridge, the frontier call is charged and
collected, a cache hit is neither, and the route rides on the completion (streams too)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from evermind.agent.routed import RoutedBridge
from evermind.agent.router import Budget, InferenceRouter, RouterConfig
from evermind.bridges.base import CacheInfo, ChatRequest, Completion, Delta, Message, Usage


class Recording:
    """A bridge that answers with its name and remembers what it was asked."""

    def __init__(self, provider: str, cost: float = 0.0, cached: bool = False) -> None:
        self.provider = provider
        self.cost = cost
        self.cached = cached
        self.asked: list[ChatRequest] = []

    @property
    def last_usage(self) -> Usage | None:
        return None

    def _completion(self, request: ChatRequest) -> Completion:
        hit = CacheInfo("l1", 0.99, "q", Usage(), None) if self.cached else None
        return Completion(
            f"from {self.provider}", request.model, self.provider, cost_usd=self.cost, cached=hit
        )

    async def generate(self, request: ChatRequest) -> Completion:
        self.asked.append(request)
        return self._completion(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[Delta]:
        self.asked.append(request)
        yield Delta("from ")
        yield Delta(self.provider, self._completion(request))

    async def aclose(self) -> None:
        pass


def request(text: str) -> ChatRequest:
    return ChatRequest(model="auto", messages=(Message("user", text),), tenant="alpha")


def routed(
    surprise: float, frontier: Recording, budget: Budget | None = None
) -> tuple[RoutedBridge, Recording, list[tuple[ChatRequest, Completion]]]:
    collected: list[tuple[ChatRequest, Completion]] = []
    router = InferenceRouter(RouterConfig(max_surprise=1.0), lambda _text: surprise, budget)
    local = Recording("evermind")
    bridge = RoutedBridge(
        router, local, frontier, "gpt-x", collect=lambda r, c: collected.append((r, c))
    )
    return bridge, local, collected


def test_the_confidence_signal_decides_between_local_and_frontier() -> None:
    sure, local, _ = routed(0.2, Recording("openai"))
    answer = asyncio.run(sure.generate(request("a short ask")))
    assert (answer.provider, answer.route) == ("evermind", ("local", "confident"))
    assert local.asked and local.asked[0].model == "auto"

    frontier = Recording("openai", cost=0.01)
    unsure, local, collected = routed(3.0, frontier)
    answer = asyncio.run(unsure.generate(request("a short ask")))
    assert (answer.provider, answer.route) == ("openai", ("frontier", "confidence"))
    assert not local.asked
    assert frontier.asked[0].model == "gpt-x"  # renamed for the upstream
    assert [c.text for _, c in collected] == ["from openai"]


def test_a_frontier_call_is_charged_and_a_spent_budget_keeps_asks_local() -> None:
    budget = Budget({"alpha": 0.015})
    frontier = Recording("openai", cost=0.01)
    bridge, local, _ = routed(3.0, frontier, budget)
    asyncio.run(bridge.generate(request("first")))
    assert budget.spent("alpha") == 0.01
    asyncio.run(bridge.generate(request("second")))  # 0.01 spent, estimate unknown: frontier
    assert budget.spent("alpha") == 0.02
    third = asyncio.run(bridge.generate(request("third")))
    assert third.route == ("local", "budget")
    assert len(local.asked) == 1


def test_a_cache_hit_is_neither_charged_nor_collected() -> None:
    budget = Budget({"alpha": 1.0})
    bridge, _, collected = routed(3.0, Recording("openai", cost=0.5, cached=True), budget)
    answer = asyncio.run(bridge.generate(request("an ask")))
    assert answer.cached is not None and answer.route == ("frontier", "confidence")
    assert budget.spent("alpha") == 0.0 and not collected


def test_a_stream_carries_the_route_on_its_last_delta() -> None:
    bridge, _, collected = routed(3.0, Recording("openai", cost=0.01))

    async def run() -> list[Delta]:
        return [d async for d in bridge.stream(request("an ask"))]

    deltas = asyncio.run(run())
    assert "".join(d.text for d in deltas) == "from openai"
    last = deltas[-1].completion
    assert last is not None and last.route == ("frontier", "confidence")
    assert dataclasses.replace(last, route=None).text == "from openai"
    assert len(collected) == 1
