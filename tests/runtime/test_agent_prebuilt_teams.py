"""The prebuilt Reflection and Supervisor agents over the official SDKs against loopback
servers with scripted models: reflection stops on the critic's approval or at its bound;
a supervisor delegates through native tool calls to two workers (a ReAct researcher with a
tool, and a writer function) and answers with both contributions; a name that is no worker
is an error result, not a crash."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from evermind.agent.graph import MemoryCheckpointer, StepEvent
from evermind.agent.prebuilt import (
    approved,
    create_react_agent,
    create_reflection_agent,
    create_supervisor,
)
from evermind.bridges.anthropic import AnthropicBridge
from evermind.bridges.openai import OpenAIBridge
from evermind.errors import ConfigError, GraphError
from tests.runtime.test_agent_prebuilt_react import bridge_of, upstream  # noqa: F401
from tests.upstreams import AnthropicUpstream, Conversation, OpenAIUpstream, Upstream

TASK = "Write one sentence announcing the offsite."


def writer_and_critic(approve_on: int) -> Any:
    """A writer that numbers its drafts, and a critic (its system text says "review") that
    approves draft ``approve_on`` (0: never)."""

    def think(c: Conversation) -> str:
        if "review a draft" in c.system:
            draft = c.last.text.split("Draft:\n", 1)[1]
            return "APPROVED" if draft == f"Draft {approve_on}." else f"Not yet: {draft}"
        drafts = [t.text for t in c.turns if t.role == "assistant"]  # the latest draft only
        return f"Draft {int(drafts[-1].split()[1].rstrip('.')) + 1 if drafts else 1}."

    return think


def test_the_approval_convention() -> None:
    assert approved("APPROVED") and approved("  approved. Ship it") and approved("Approved:")
    assert not approved("Not approved") and not approved("") and not approved("APPROVEDLY")


def test_reflection_stops_when_the_critic_approves(upstream: Upstream) -> None:  # noqa: F811
    upstream.think = writer_and_critic(approve_on=2)

    async def main() -> dict[str, Any]:
        bridge = bridge_of(upstream)
        agent = create_reflection_agent(bridge, "model-x", max_rounds=5)
        events = [e async for e in agent.astream({"task": TASK})]
        nodes = [next(iter(e.updates)) for e in events if isinstance(e, StepEvent)]
        assert nodes == ["generate", "critique", "revise", "critique"]
        await bridge.aclose()
        return events[-1].values  # type: ignore[union-attr]

    values = asyncio.run(main())
    assert values["draft"] == "Draft 2." and values["rounds"] == 2
    assert values["stop_reason"] == "approved" and values["critique"] == "APPROVED"
    assert [h["critique"] for h in values["history"]] == ["Not yet: Draft 1.", "APPROVED"]
    revise = upstream.requests[2].body  # the revision saw the draft and the critique
    text = json.dumps(revise)
    assert "Draft 1." in text and "Not yet: Draft 1." in text


def test_reflection_never_approved_stops_at_the_bound_with_another_critic() -> None:
    async def main(writer: AnthropicUpstream, critic: OpenAIUpstream) -> dict[str, Any]:
        bridge = AnthropicBridge(api_key=writer.api_key, base_url=writer.url, max_retries=0)
        judge = OpenAIBridge(api_key=critic.api_key, base_url=critic.url + "/v1", max_retries=0)
        agent = create_reflection_agent(
            bridge, "claude-x", critic_bridge=judge, critic_model="gpt-x", max_rounds=3
        )
        result = await agent.ainvoke({"task": TASK})
        await bridge.aclose()
        await judge.aclose()
        return result.values

    think = writer_and_critic(approve_on=0)
    with AnthropicUpstream(think=think) as writer, OpenAIUpstream(think=think) as critic:
        values = asyncio.run(main(writer, critic))
        assert len(writer.requests) == 3 and len(critic.requests) == 3  # 1 + 2 revisions
        assert {r.body["model"] for r in critic.requests} == {"gpt-x"}
    assert values["stop_reason"] == "max_rounds" and values["rounds"] == 3
    assert values["draft"] == "Draft 3."
    with pytest.raises(ConfigError, match="max_rounds must be an int >= 1, got 0"):
        create_reflection_agent(bridge_of(writer), "m", max_rounds=0)


def lookup_population(city: str) -> str:
    """The population of a city.

    Args:
        city: The city.
    """
    return {"Lisbon": "545,000"}.get(city, "unknown")


def team_think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
    """The supervisor (it is offered transfer tools) and the researcher (a lookup tool)."""
    if "lookup_population" in c.tools:  # the researcher
        if c.last.role == "user":
            return [("lookup_population", {"city": "Lisbon"})]
        return f"Lisbon has {c.last.text} people."
    results = [t.text for t in c.turns if t.role == "tool"]
    if not results:
        return [
            ("transfer_to_researcher", {"task": "Find the population of Lisbon"}),
            ("transfer_to_nobody", {"task": "Book a table"}),
        ]
    if len(results) == 2:
        return [("transfer_to_writer", {"task": f"One line for the newsletter: {results[0]}"})]
    return f"Done. {results[-1]}"


def test_a_supervisor_delegates_to_two_workers(upstream: Upstream) -> None:  # noqa: F811
    upstream.think = team_think
    briefs: list[str] = []

    async def writer(task: str) -> str:
        """Writes newsletter lines."""
        briefs.append(task)
        return "Written: " + task.split(": ", 1)[1]

    async def main() -> list[Any]:
        bridge = bridge_of(upstream)
        researcher = create_react_agent(
            bridge, "model-x", [lookup_population], checkpointer=MemoryCheckpointer()
        )
        boss = create_supervisor(
            bridge, "model-x", {"researcher": researcher, "writer": writer}, max_handoffs=4
        )
        events = [
            e async for e in boss.astream({"messages": ["Announce Lisbon's size"]}, thread_id="s")
        ]
        # The researcher's own run is a thread of its checkpointer, named after the call.
        first_call = events[-1].values["messages"][1]["tool_calls"][0]  # type: ignore[union-attr]
        sub = researcher.get_state(f"s:researcher:{first_call['id']}")
        assert sub.values["answer"] == "Lisbon has 545,000 people."
        await bridge.aclose()
        return events

    events = asyncio.run(main())
    steps = [sorted(e.updates) for e in events if isinstance(e, StepEvent)]
    assert steps == [
        ["supervisor"], ["researcher", "unknown_worker"], ["supervisor"], ["writer"], ["supervisor"]
    ]  # fmt: skip
    values = events[-1].values  # type: ignore[union-attr]
    assert values["answer"] == "Done. Written: Lisbon has 545,000 people."
    assert values["stop_reason"] == "answered" and values["handoffs"] == 3
    assert briefs == ["One line for the newsletter: Lisbon has 545,000 people."]
    errors = [m["content"] for m in values["messages"] if m.get("is_error")]
    assert errors == [
        "error: no worker is called by 'transfer_to_nobody'; call one of: "
        "transfer_to_researcher, transfer_to_writer"
    ]
    first = upstream.requests[0].body
    names = [t.get("name") or t["function"]["name"] for t in first["tools"]]
    assert names == ["transfer_to_researcher", "transfer_to_writer"]


def test_supervisor_configuration_errors(upstream: Upstream) -> None:  # noqa: F811
    bridge = bridge_of(upstream)
    with pytest.raises(ConfigError, match="give at least one worker"):
        create_supervisor(bridge, "m", {})
    with pytest.raises(ConfigError, match="'supervisor' is reserved"):
        create_supervisor(bridge, "m", {"supervisor": lambda task: task})
    with pytest.raises(ConfigError, match="worker 'w' is a int"):
        create_supervisor(bridge, "m", {"w": 3})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="tool name 'transfer_to_two words'"):
        create_supervisor(bridge, "m", {"two words": lambda task: task})


def test_a_worker_run_is_reused_or_resumed_by_its_thread_and_never_left_waiting() -> None:
    """A supervisor step that runs again (after a crash) finds its worker's thread: finished,
    its output is reused; paused, it is resumed; a worker that stops at an interrupt is a
    clear error of the step, not a silent result."""
    looked_up: list[str] = []

    def lookup_population(city: str) -> str:
        """The population of a city."""
        looked_up.append(city)
        return "545,000"

    def think(c: Conversation) -> str | list[tuple[str, dict[str, Any]]]:
        tools = [t.text for t in c.turns if t.role == "tool"]
        if "lookup_population" in c.tools:
            return [("lookup_population", {"city": "Lisbon"})] if not tools else tools[0]
        if not tools:
            return [("transfer_to_researcher", {"task": "Lisbon"})]
        return f"Done: {tools[0]}"

    async def main(gpt: OpenAIUpstream) -> None:
        bridge = OpenAIBridge(api_key=gpt.api_key, base_url=gpt.url + "/v1", max_retries=0)
        researcher = create_react_agent(bridge, "m", [lookup_population])
        # The loopback numbers its calls: the supervisor's first is call_000001. A finished
        # run of the researcher is already in the thread the supervisor would use.
        gpt.think = lambda c: "from before the crash"
        await researcher.ainvoke({"messages": ["Lisbon"]}, thread_id="s:researcher:call_000002")
        gpt.think = think
        boss = create_supervisor(bridge, "m", {"researcher": researcher})
        done = await boss.ainvoke({"messages": ["How big is Lisbon?"]}, thread_id="s")
        assert done.values["answer"] == "Done: from before the crash" and looked_up == []

        # A researcher that pauses before its tools: the supervisor's step fails clearly.
        paused = create_react_agent(bridge, "m", [lookup_population], interrupt_before=["tools"])
        strict = create_supervisor(bridge, "m", {"researcher": paused})
        with pytest.raises(GraphError, match="worker 'researcher' stopped at an interrupt"):
            await strict.ainvoke({"messages": ["How big is Lisbon?"]}, thread_id="p")
        await bridge.aclose()

    with OpenAIUpstream() as gpt:
        asyncio.run(main(gpt))
