"""The sync graph API runs every call on one event loop of the graph's own: a node's SDK client
(its connection pool belongs to the loop it was first used on) works across ``invoke`` and
``resume``, which ``asyncio.run`` per call broke ("Event loop is closed")."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Annotated, TypedDict

import pytest

from evermind.agent.graph import END, START, AgentGraph, NodeContext
from evermind.bridges.base import ChatRequest, Message
from evermind.bridges.openai import OpenAIBridge
from tests.upstreams import OpenAIUpstream


class Talk(TypedDict):
    replies: Annotated[list, operator.add]


@pytest.fixture
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as server:
        yield server


def test_an_sdk_bridge_survives_invoke_then_resume(upstream: OpenAIUpstream) -> None:
    bridge = OpenAIBridge(api_key=upstream.api_key, base_url=upstream.url + "/v1", max_retries=0)

    def ask(text: str):  # type: ignore[no-untyped-def]
        async def node(state: Talk, ctx: NodeContext) -> dict[str, list[str]]:
            request = ChatRequest(model="gpt-test", messages=(Message("user", text),))
            return {"replies": [(await ctx.generate(bridge, request)).text]}

        return node

    graph = AgentGraph(Talk)
    graph.add_node("first", ask("one")).add_node("second", ask("two"))
    graph.add_edge(START, "first").add_edge("first", "second").add_edge("second", END)
    compiled = graph.compile(interrupt_before=["second"])
    try:
        paused = compiled.invoke({"replies": []}, thread_id="t")
        assert paused.status == "interrupted" and paused.values["replies"] == ["Answer to: one"]
        done = compiled.resume("t")
        assert done.status == "done"
        assert done.values["replies"] == ["Answer to: one", "Answer to: two"]
        events = list(compiled.stream({"replies": []}, thread_id="u"))
        assert events[-1].values["replies"] == ["Answer to: one"]  # type: ignore[union-attr]
        assert compiled.resume("u").values["replies"][-1] == "Answer to: two"
    finally:
        compiled.close()
    assert len(upstream.requests) == 4
