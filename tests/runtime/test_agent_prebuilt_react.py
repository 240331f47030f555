"""The prebuilt ReAct agent over the official SDKs against loopback servers speaking each
provider's wire format: two sequential tool calls of two different tools plus a fact only
memory holds; the tool calls on the wire in each provider's native shape; streaming; parallel
calls; failures the model reads; the step bound; a pause before tools; learning through
write-through cognition."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evermind.agent.graph import SQLiteCheckpointer, StepEvent
from evermind.agent.prebuilt import create_react_agent, memory_recall_tool, tool
from evermind.bridges.anthropic import AnthropicBridge
from evermind.bridges.base import Bridge
from evermind.bridges.openai import OpenAIBridge
from evermind.memory import InMemoryBackend, MemoryStore
from tests.upstreams import AnthropicUpstream, Conversation, OpenAIUpstream, Upstream

QUESTION = "When is the Lisbon offsite, what weather should I expect, and where do I stay?"


def offsite_date(city: str) -> str:
    """The dates of the team offsite in a city.

    Args:
        city: The city's name.
    """
    return {"Lisbon": "12-14 May"}.get(city, "no offsite there")


async def weather(city: str, month: str) -> str:
    """The usual weather in a city in a month.

    Args:
        city: The city.
        month: The month's English name.
    """
    return f"sunny, 24 C in {city} in {month}" if month == "May" else "unknown"


def two_steps(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
    """Asks the dates, then the weather for the month the dates named, then answers with
    both and the hotel only the memory facts (the system text) mention."""
    results = [t.text for t in c.turns[c.turns.index(_last_user(c)) :] if t.role == "tool"]
    if not results:
        return [("offsite_date", {"city": "Lisbon"})]
    if len(results) == 1:
        month = "May" if "May" in results[0] else "June"
        return [("weather", {"city": "Lisbon", "month": month})]
    hotel = "Hotel Avenida" if "Hotel Avenida" in c.system else "no hotel known"
    return f"The offsite is {results[0]}; expect {results[1]}; you stay at {hotel}."


def _last_user(c: Conversation) -> Any:
    return [t for t in c.turns if t.role == "user"][-1]


@pytest.fixture(params=["anthropic", "openai"])
def upstream(request: pytest.FixtureRequest) -> Iterator[Upstream]:
    kind = AnthropicUpstream if request.param == "anthropic" else OpenAIUpstream
    with kind() as server:
        yield server


def bridge_of(upstream: Upstream) -> Bridge:
    if isinstance(upstream, AnthropicUpstream):
        return AnthropicBridge(api_key=upstream.api_key, base_url=upstream.url, max_retries=0)
    return OpenAIBridge(api_key=upstream.api_key, base_url=upstream.url + "/v1", max_retries=0)


async def memory() -> MemoryStore:
    store = MemoryStore(InMemoryBackend())
    await store.remember("offsite-hotel", "For the Lisbon offsite the team stays at Hotel Avenida")
    await store.remember("lunch", "Lunch orders close at eleven")
    return store


def wire_tool_turns(upstream: Upstream, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(kind, name or id, arguments or content) of the tool calls and results in a request,
    read in the provider's own format."""
    found: list[tuple[str, str, Any]] = []
    for message in body["messages"]:
        if isinstance(upstream, AnthropicUpstream):
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block["type"] == "tool_use":
                    found.append(("tool_use", block["name"], block["input"]))
                elif block["type"] == "tool_result":
                    found.append(("tool_result", block["tool_use_id"], block["content"]))
        else:
            for call in message.get("tool_calls") or ():
                assert call["type"] == "function"
                arguments = json.loads(call["function"]["arguments"])
                found.append(("tool_calls", call["function"]["name"], arguments))
            if message["role"] == "tool":
                found.append(("role:tool", message["tool_call_id"], message["content"]))
    return found


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
def test_two_sequential_tool_calls_and_a_memory_fact(upstream: Upstream, streamed: bool) -> None:
    upstream.think = two_steps
    pieces: list[str] = []

    async def main() -> None:
        bridge, store = bridge_of(upstream), await memory()
        agent = create_react_agent(
            bridge, "model-x", [offsite_date, weather], memory=store, learn=False,
            system="You plan team trips.", on_text=pieces.append if streamed else None,
        )  # fmt: skip
        events = [e async for e in agent.astream({"messages": [QUESTION]}, thread_id="t1")]
        result = events[-1]
        steps = [e for e in events if isinstance(e, StepEvent)]
        assert [list(e.updates) for e in steps] == [["agent"], ["tools"]] * 2 + [["agent"]]
        values = result.values  # type: ignore[union-attr]
        assert values["stop_reason"] == "answered" and values["steps"] == 3
        assert values["answer"] == (
            "The offsite is 12-14 May; expect sunny, 24 C in Lisbon in May; "
            "you stay at Hotel Avenida."
        )
        assert values["facts"][0] == "offsite-hotel"
        if streamed:
            assert "".join(pieces).strip() == values["answer"]
        await bridge.aclose()

    asyncio.run(main())
    bodies = [r.body for r in upstream.requests]
    assert len(bodies) == 3 and all(bool(b.get("stream")) is streamed for b in bodies)
    last = wire_tool_turns(upstream, bodies[-1])
    if isinstance(upstream, AnthropicUpstream):
        assert [t["name"] for t in bodies[0]["tools"]] == ["offsite_date", "weather"]
        assert bodies[0]["tools"][0]["input_schema"]["required"] == ["city"]
        assert [(k, n) for k, n, _ in last[::2]] == [
            ("tool_use", "offsite_date"), ("tool_use", "weather")
        ]  # fmt: skip
        assert last[1][0] == "tool_result" and last[1][2] == "12-14 May"
        ids = [b["id"] for m in bodies[-1]["messages"] if m["role"] == "assistant"
               for b in m["content"] if b["type"] == "tool_use"]  # fmt: skip
        assert [last[1][1], last[3][1]] == ids  # each result answers its tool_use id
        assert "Hotel Avenida" in bodies[0]["system"][1]["text"]  # the facts block
    else:
        assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["offsite_date", "weather"]
        month = {"type": "string", "description": "The month's English name."}
        assert bodies[0]["tools"][1] == {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The usual weather in a city in a month.",
                "parameters": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["city", "month"],
                    "properties": {
                        "city": {"type": "string", "description": "The city."},
                        "month": month,
                    },
                },
            },
        }
        assert [(k, n) for k, n, _ in last[::2]] == [
            ("tool_calls", "offsite_date"), ("tool_calls", "weather")
        ]  # fmt: skip
        assert last[1][0] == "role:tool" and last[1][2] == "12-14 May"
        assert last[2][2] == {"city": "Lisbon", "month": "May"}
        assert "Hotel Avenida" in bodies[0]["messages"][1]["content"]  # the facts message


def test_parallel_calls_run_concurrently_and_failures_are_results(upstream: Upstream) -> None:
    started = asyncio.Event()

    async def first(x: int) -> str:
        """Waits for second to be running."""
        await asyncio.wait_for(started.wait(), 10)
        return f"first {x}"

    async def second(x: int) -> str:
        """Runs beside first."""
        started.set()
        return f"second {x}"

    def broken(x: int) -> str:
        """Always fails."""
        raise ValueError("the disk is on fire")

    def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
        if c.last.role == "user":
            return [("first", {"x": 1}), ("second", {"x": 2}), ("broken", {"x": 3}),
                    ("second", {"x": "three"}), ("missing", {})]  # fmt: skip
        return " | ".join(t.text for t in c.turns if t.role == "tool")

    upstream.think = think

    async def main() -> dict[str, Any]:
        bridge = bridge_of(upstream)
        agent = create_react_agent(bridge, "model-x", [first, second, broken])
        result = await agent.ainvoke({"messages": ["go"]})
        await bridge.aclose()
        return result.values

    values = asyncio.run(main())
    assert values["answer"].split(" | ") == [
        "first 1",
        "second 2",
        "error: tool 'broken' failed: ValueError: the disk is on fire",
        "error: tool 'second': argument 'x' must be integer, got str 'three'",
        "error: no tool named 'missing'; tools: broken, first, second",
    ]
    tools = [m for m in values["messages"] if m["role"] == "tool"]
    assert [m["is_error"] for m in tools] == [False, False, True, True, True]


def test_the_step_bound_stops_with_a_reason_and_a_valid_thread(upstream: Upstream) -> None:
    upstream.think = lambda c: [("offsite_date", {"city": "Lisbon"})]  # never answers

    async def main() -> None:
        bridge = bridge_of(upstream)
        agent = create_react_agent(bridge, "model-x", [offsite_date], max_steps=3)
        result = await agent.ainvoke({"messages": ["loop forever"]}, thread_id="t")
        values = result.values
        assert values["stop_reason"] == "max_steps" and values["steps"] == 3
        assert values["messages"][-1]["content"].startswith("not run: the agent stopped")
        assert len(upstream.requests) == 3
        # The thread is still a valid conversation: its next turn goes through the API.
        upstream.think = lambda c: "fine"
        again = await agent.ainvoke({"messages": ["again"]}, thread_id="t")
        assert again.values["answer"] == "fine" and again.values["steps"] == 1
        await bridge.aclose()

    asyncio.run(main())


def test_a_pause_before_tools_resumes_or_is_answered_by_a_human(
    upstream: Upstream, tmp_path: Path
) -> None:
    upstream.think = two_steps
    ran: list[str] = []

    def dates(city: str) -> str:
        """Dates."""
        ran.append(city)
        return "12-14 May"

    async def main() -> None:
        bridge = bridge_of(upstream)
        agent = create_react_agent(
            bridge, "model-x", [tool(dates, name="offsite_date"), weather],
            checkpointer=SQLiteCheckpointer(tmp_path / "runs.db"), interrupt_before=["tools"],
        )  # fmt: skip
        first = await agent.ainvoke({"messages": [QUESTION]}, thread_id="t")
        assert first.status == "interrupted" and first.next == ["tools"]
        call = first.values["messages"][-1]["tool_calls"][0]
        assert call["name"] == "offsite_date" and ran == []
        second = await agent.aresume("t")  # approved: the tool runs, the model goes on
        assert ran == ["Lisbon"] and second.status == "interrupted"
        pending = second.values["messages"][-1]["tool_calls"][0]
        assert pending["name"] == "weather"
        # A human answers this call instead of the tool (update_state), then resumes.
        agent.update_state("t", {"messages": [{
            "role": "tool", "tool_call_id": pending["id"], "name": "weather",
            "content": "the operator says: rain", "is_error": False,
        }]})  # fmt: skip
        done = await agent.aresume("t")
        assert done.status == "done"
        assert done.values["answer"].startswith(
            "The offsite is 12-14 May; expect the operator says"
        )
        await bridge.aclose()

    asyncio.run(main())


def test_the_agent_learns_through_write_through_cognition(upstream: Upstream) -> None:
    def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
        if c.last.role == "user" and "vegetarian" in c.last.text:
            return [("memory_remember", {"key": "user-diet", "content": "The user is vegetarian"})]
        if c.last.role == "tool":
            return f"Noted ({c.last.text})."
        return "Vegetarian dinner." if "The user is vegetarian" in c.system else "Any dinner."

    upstream.think = think

    async def main() -> None:
        bridge, store = bridge_of(upstream), MemoryStore(InMemoryBackend())
        agent = create_react_agent(bridge, "model-x", [memory_recall_tool(store)], memory=store)
        first = await agent.ainvoke({"messages": ["I am vegetarian, remember it"]}, thread_id="t")
        assert first.values["answer"].startswith("Noted (augment")
        record = await store.get("user-diet")
        assert record is not None and record.content == "The user is vegetarian"
        second = await agent.ainvoke({"messages": ["What dinner suits the user?"]}, thread_id="t")
        assert second.values["answer"] == "Vegetarian dinner."
        assert second.values["facts"] == ["user-diet"]
        await bridge.aclose()

    asyncio.run(main())
